"""Plugins, one module per concern. They implement extension points of ``scheduler.framework`` and do not
import each other; ``scheduler.core.registry`` names them."""
