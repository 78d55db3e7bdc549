// The console script.
