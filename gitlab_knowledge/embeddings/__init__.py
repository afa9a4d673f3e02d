"""Embeddings: providers (embedded ONNX model, Ollama) and the LanceDB vector tables."""
