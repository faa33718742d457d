"""An Iceberg REST catalog for weir's tests: the REST protocol (apache/iceberg's
open-api/rest-catalog-open-api.yaml) over pyiceberg's SQL catalog on SQLite.

Every decision that matters is pyiceberg's, not weir's: a commit's requirements are
checked by pyiceberg against the table's current metadata, its updates applied and
the next metadata file written by pyiceberg, and the swap of the table's metadata
location is pyiceberg's conditional UPDATE in SQLite (a commit that lost a race is a
409, as a REST server answers). The tables are then read back with pyiceberg's own
SqlCatalog on the same file: no code of weir's on the reading side.

The public REST fixtures (apache/iceberg-rest-fixture, Polaris, Lakekeeper) are
container images or JVM jars that this project's registries do not serve, hence this
file. It serves what a writer of existing tables calls: config, OAuth2 client
credentials, namespaces, tables (create, load, exists, commit, drop).

Faults, for the tests:
  --credential ID:SECRET   demand OAuth2 client credentials; tokens at v1/oauth/tokens
  --token-uses N           a token is refused (401) after N requests: it expired
  --unknown-every N        every Nth commit is applied, then answered 504 (a gateway
                           timed out: the client cannot know whether it landed)
Counters at GET /test/counters (tokens issued, 401s, commits, 409s, 504s).
"""

import argparse
import json
import re
import secrets
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pydantic import TypeAdapter
from pyiceberg.catalog.rest import CreateTableRequest, TableResponse
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import CommitTableResponse
from pyiceberg.table.update import TableRequirement, TableUpdate

args = argparse.ArgumentParser()
args.add_argument("--host", default="127.0.0.1")
args.add_argument("--port", type=int, required=True)
args.add_argument("--database", required=True)
args.add_argument("--warehouse", required=True)
args.add_argument("--credential")
args.add_argument("--token-uses", type=int, default=0)
args.add_argument("--unknown-every", type=int, default=0)
opts = args.parse_args()

catalog = SqlCatalog("weir", uri="sqlite:///" + opts.database, warehouse="file://" + opts.warehouse)
requirements = TypeAdapter(list[TableRequirement])
updates = TypeAdapter(list[TableUpdate])
lock = threading.Lock()
catalog_lock = threading.Lock()
tokens = {}  # token -> requests left (None: unlimited)
counters = {"tokens": 0, "unauthorized": 0, "commits": 0, "conflicts": 0, "unknown": 0}


def count(name):
    with lock:
        counters[name] += 1
        return counters[name]


def namespace(part):
    # Multi-level namespaces travel joined by the unit separator (0x1F).
    return tuple(urllib.parse.unquote(part).split("\x1f"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body=None):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        if self.command == "HEAD":
            data = b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, kind, message):
        self.reply(status, {"error": {"message": message, "type": kind, "code": status}})

    def body(self):
        return self.request_body

    def authorized(self):
        if not opts.credential:
            return True
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        with lock:
            left = tokens.get(token, 0)
            if left is None or left > 0:
                if left is not None:
                    tokens[token] = left - 1
                return True
        count("unauthorized")
        self.error(401, "NotAuthorizedException", "the token is unknown or expired")
        return False

    def handle_one(self, method):
        # Read whole before any answer, or a refused request's body would be taken
        # for the next request on the connection.
        n = int(self.headers.get("Content-Length") or 0)
        self.request_body = self.rfile.read(n) if n else b""
        path = urllib.parse.urlparse(self.path).path
        if path == "/test/counters":
            with lock:
                return self.reply(200, dict(counters))
        if path == "/v1/oauth/tokens" and method == "POST":
            form = urllib.parse.parse_qs(self.body().decode())
            given = form.get("client_id", [""])[0] + ":" + form.get("client_secret", [""])[0]
            if form.get("grant_type", [""])[0] != "client_credentials" or given != opts.credential:
                return self.reply(401, {"error": "invalid_client", "error_description": "bad client credentials"})
            token = secrets.token_hex(16)
            with lock:
                tokens[token] = opts.token_uses or None
            count("tokens")
            return self.reply(200, {"access_token": token, "token_type": "bearer", "expires_in": 3600,
                                    "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})
        if not self.authorized():
            return
        try:
            # One request at a time on the catalog (SQLite has one writer): the races
            # that matter are between requests, a load and a later commit.
            with catalog_lock:
                self.route(method, path)
        except (NoSuchTableError, NoSuchNamespaceError) as e:
            self.error(404, type(e).__name__, str(e))
        except (TableAlreadyExistsError, NamespaceAlreadyExistsError) as e:
            self.error(409, "AlreadyExistsException", str(e))
        except CommitFailedException as e:
            count("conflicts")
            self.error(409, "CommitFailedException", str(e))

    def route(self, method, path):
        if path == "/v1/config" and method == "GET":
            return self.reply(200, {"defaults": {}, "overrides": {}})
        if path == "/v1/namespaces":
            if method == "GET":
                return self.reply(200, {"namespaces": [list(n) for n in catalog.list_namespaces()]})
            if method == "POST":
                req = json.loads(self.body())
                catalog.create_namespace(tuple(req["namespace"]), req.get("properties") or {})
                return self.reply(200, {"namespace": req["namespace"], "properties": req.get("properties") or {}})
        m = re.fullmatch(r"/v1/namespaces/([^/]+)", path)
        if m:
            ns = namespace(m[1])
            props = catalog.load_namespace_properties(ns)
            if method == "HEAD":
                return self.reply(204)
            return self.reply(200, {"namespace": list(ns), "properties": props})
        m = re.fullmatch(r"/v1/namespaces/([^/]+)/tables", path)
        if m:
            ns = namespace(m[1])
            if method == "GET":
                return self.reply(200, {"identifiers": [{"namespace": list(ns), "name": t[-1]}
                                                        for t in catalog.list_tables(ns)]})
            req = CreateTableRequest.model_validate_json(self.body())
            table = catalog.create_table(ns + (req.name,), schema=req.table_schema,
                                         partition_spec=req.partition_spec, properties=req.properties)
            return self.table(table)
        m = re.fullmatch(r"/v1/namespaces/([^/]+)/tables/([^/]+)", path)
        if m:
            ident = namespace(m[1]) + (urllib.parse.unquote(m[2]),)
            if method == "HEAD":
                catalog.load_table(ident)
                return self.reply(204)
            if method == "GET":
                return self.table(catalog.load_table(ident))
            if method == "DELETE":
                catalog.drop_table(ident)
                return self.reply(204)
            if method == "POST":
                return self.commit(ident, json.loads(self.body()))
        self.error(404, "NoSuchEndpoint", f"{method} {path} is not served here")

    def table(self, table):
        self.reply(200, TableResponse(metadata_location=table.metadata_location, metadata=table.metadata)
                   .model_dump_json(by_alias=True, exclude_none=True).encode())

    def commit(self, ident, req):
        table = catalog.load_table(ident)
        done = catalog.commit_table(table, tuple(requirements.validate_python(req.get("requirements") or [])),
                                    tuple(updates.validate_python(req.get("updates") or [])))
        n = count("commits")
        if opts.unknown_every and n % opts.unknown_every == 0:
            count("unknown")
            return self.error(504, "GatewayTimeout", "the commit was applied; the answer was lost")
        self.reply(200, CommitTableResponse(metadata=done.metadata, metadata_location=done.metadata_location)
                   .model_dump_json(by_alias=True, exclude_none=True).encode())

    def do_GET(self):
        self.handle_one("GET")

    def do_POST(self):
        self.handle_one("POST")

    def do_HEAD(self):
        self.handle_one("HEAD")

    def do_DELETE(self):
        self.handle_one("DELETE")


ThreadingHTTPServer((opts.host, opts.port), Handler).serve_forever()
