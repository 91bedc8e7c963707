"""The Retrieval Inspector's sections. ``controls.draw`` lays out the retrieval settings and
returns them as one frozen ``Controls`` value; each section module has one ``show(ws,
controls)`` that lays out its part from that value and the Workspace's lab, nothing else."""
