"""One memory across machines: each store publishes its log to object storage, pulls the others', and checks them.

The model, the findings and what is proven: docs/sync.md. Modules: ``layout``,
``remote``, ``state``, ``publish``, ``mirror`` (pull and verify), ``restore``,
``erasure``, ``sealed``, ``union`` (search over the mirrors), ``runner`` (the command).
"""
