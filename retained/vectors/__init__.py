"""Embeddings: the embedding clients with their breaker, what a record is embedded as, and the vector math of fusion.

Optional: without an embedder configured nothing here runs, and search
answers lexically and says so.
"""
