"""What every stage reads: the contract's vocabulary, the runner list, safe file names, did-you-mean, and the
progress a long operation reports. Imports nothing of the aggregator's stages."""
