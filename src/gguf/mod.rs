//! GGUF files: header, metadata, tensor infos and zero-copy tensor data views.
