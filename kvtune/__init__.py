"""The app layer: the worker, the command line and the demo, above both `db` and `tuner`."""
