"""ONNX frontend: import, clean up, fold and fuse into the graph IR."""
