"""An independent shop site (own server, own HTML) for replay tests; see ``server.py``."""

from tests.independent_site.server import HOST, IndieShop

__all__ = ["HOST", "IndieShop"]
