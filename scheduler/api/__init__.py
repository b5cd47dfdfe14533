"""Pure types and parsers: quantities, resources, pods, nodes. No I/O.

Invalid input raises :class:`scheduler.api.errors.InvalidObject`, naming the object and the field.
"""
