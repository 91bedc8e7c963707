"""Model providers behind one small interface each, chosen by settings: embedders (``embed_batch``
with a batch size) and answerers (``stream``), plus the clients of the model services they call.
May import only the base modules (config, errors, events, citations, registry)."""
