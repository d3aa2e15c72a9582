"""Generated protobuf and gRPC code for warden/v1 (see generate.py)."""
