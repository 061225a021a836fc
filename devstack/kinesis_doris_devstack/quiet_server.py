"""What the devstack's threaded HTTP servers share."""

from __future__ import annotations

import logging
import sys
from http.server import ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class QuietThreadingHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server whose clients hanging up mid-request (a loader giving up, a reader
    closing its subscription) are logged quietly, not dumped to stderr as tracebacks."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("client %s went away: %s", client_address, error)
        else:
            log.exception("request from %s failed", client_address)
