"""A headless Chromium that a test starts reaches nothing beyond this host's loopback.

``--disable-background-networking`` and its kin are not enough: Chromium still looked up
update.googleapis.com, accounts.google.com and clients2.google.com (348 DNS queries to the
host's resolver in one 15 s run of the page tests). Inside the browser every name resolves
to nothing but ``localhost`` and ``127.0.0.1`` (without that exception the service's pages
on 127.0.0.1 did not load, and the failed page's DNS probe asked 8.8.8.8).
"""

from __future__ import annotations

LOCAL_ONLY = [
    "--no-first-run", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-domain-reliability", "--no-pings",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
