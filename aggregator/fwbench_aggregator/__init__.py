"""fwbench aggregator: fans requests out to runners and compares what they measured."""
