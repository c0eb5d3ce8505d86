"""Embeddings: the embedding clients with their breaker, and the vector math of fusion.

Optional: without an embedder configured nothing here runs, and search
answers lexically and says so.
"""
