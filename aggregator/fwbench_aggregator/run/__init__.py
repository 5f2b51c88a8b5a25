"""The run stage: runners started (embedded) or reached (given), requests sent to them, runs scheduled in
counterbalanced order on the devices they share, and what runners stream back collected as RunResults. Nothing
here stores or prints: completed runs and progress go to the caller's callbacks."""
