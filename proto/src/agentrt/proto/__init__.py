"""Generated protobuf code for agentrt; never edit by hand (see proto/generate.py)."""
