"""Semantic recall: embeddings of a session's messages, and the search over them."""
