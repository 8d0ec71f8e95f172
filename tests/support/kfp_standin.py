"""A STAND-IN for the Kubeflow Pipelines API server: not KFP, only the part of its REST API that
``kfp.Client`` (SDK 2.17) calls to upload a pipeline (or a new version) and start a run of it.

No KFP API server can run here (it needs Kubernetes, MySQL and Argo), so integration tests drive
the official client against this loopback server instead. It speaks the real protocol of the
``v2beta1`` API, as generated into ``kfp_server_api`` and served by the KFP backend
(``backend/src/apiserver/server/pipeline_upload_server.go`` and the grpc-gateway routes):

* ``GET  /apis/v2beta1/healthz`` (and ``/apis/v1beta1/healthz``): as the API server answers it
  (``backend/src/apiserver/main.go``: ``{"commit_sha", "tag_name", "multi_user",
  "pipeline_store"}``, ``tag_name`` being the release, e.g. ``2.17.2``, or ``unknown`` when the
  image was built without one), or with ``via_ui=True`` as the KFP UI's server answers the same
  path (``frontend/server/handlers/healthz.ts``: ``apiServerTagName``, ``apiServerCommitHash``,
  ``apiServerMultiUser``, ``multi_user``, ``apiServerReady``, ``frontendTagName``, ...);
* ``POST /apis/v2beta1/pipelines/upload`` (multipart ``uploadfile``; query ``name``,
  ``display_name``, ``description``, ``namespace``): creates a pipeline and its first version,
  named after the pipeline; 409 when the name is taken;
* ``POST /apis/v2beta1/pipelines/upload_version`` (multipart ``uploadfile``; query ``name``,
  ``pipelineid``, ``description``): 400 without a known pipeline, 409 for a taken version name;
* ``GET  /apis/v2beta1/pipelines`` (``filter`` with ``display_name`` EQUALS, ``namespace``) and
  ``GET /apis/v2beta1/pipelines/{id}/versions`` (newest first);
* ``POST /apis/v2beta1/experiments`` (409 for a taken name) and ``GET /apis/v2beta1/experiments``;
* ``POST /apis/v2beta1/runs`` (checks the experiment, the pipeline version reference and that every
  run parameter is an input of the pipeline, as the real server does; the run keeps the body's
  ``service_account``) and ``GET /apis/v2beta1/runs/{id}``;
* ``POST /apis/v2beta1/recurringruns`` and ``GET /apis/v2beta1/recurringruns/{id}``: a recurring
  run is checked as the API server's ``toModelJob`` (``backend/src/apiserver/server/
  api_converter.go``) checks it: a name, ``max_concurrency`` from 1 to 10, an interval of at
  least one second, a cron that ``github.com/robfig/cron`` v1's ``cron.Parse`` accepts (six
  fields, seconds first, the day of the week optional, or a descriptor: :func:`robfig_cron_parse`),
  and the experiment, version reference and parameters as for a run. Its answer has protojson's
  shapes (``max_concurrency`` as a string, ``mode`` ``ENABLE``/``DISABLE``, ``status``
  ``ENABLED``/``DISABLED``); nothing is ever scheduled.

Errors have the real shapes: ``{"error_message", "error_details"}`` from the upload handlers,
``{"error", "code", "message", "details"}`` (a ``google.rpc.Status``) from the others. Uploaded
files must be KFP pipeline specs (YAML with ``pipelineInfo`` and ``root``). With ``token=...``
every request must carry ``Authorization: Bearer <token>`` (401 otherwise).

Everything received is recorded in :attr:`KfpStandIn.requests` (headers without the
``Authorization`` value: only whether it matched). Nothing runs: a run stays ``PENDING``.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

API = "/apis/v2beta1"
# google.rpc.Code values used by the real server
_GRPC_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 500: 13}


@dataclass
class RecordedRequest:
    """One request as the stand-in received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    authorized: bool | None = None
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)

    def param(self, name: str) -> str | None:
        """The first value of one query parameter, or ``None``."""
        values = self.query.get(name)
        return values[0] if values else None


class _HttpError(Exception):
    def __init__(self, status: int, message: str, *, upload: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.upload = upload


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str, bytes]]:
    """Parts of a ``multipart/form-data`` body (RFC 7578): ``name -> (filename, bytes)``."""
    match = re.search(r'boundary="?([^";]+)"?', content_type or "")
    if not content_type.startswith("multipart/form-data") or not match:
        raise _HttpError(400, "request Content-Type is not multipart/form-data", upload=True)
    delimiter = b"--" + match.group(1).encode("latin-1")
    parts: dict[str, tuple[str, bytes]] = {}
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):  # closing delimiter
            break
        chunk = chunk.removeprefix(b"\r\n")
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise _HttpError(400, "malformed multipart part", upload=True)
        disposition = ""
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                disposition = value
        name = re.search(r'\bname="([^"]*)"', disposition)
        filename = re.search(r'\bfilename="([^"]*)"', disposition)
        if name:
            parts[name.group(1)] = (
                filename.group(1) if filename else "",
                data.removesuffix(b"\r\n"),
            )
    return parts


def _filter_equals(raw: str | None) -> dict[str, str]:
    """``key -> value`` of the EQUALS predicates of a KFP ``filter`` (operation 1 or "EQUALS")."""
    if not raw:
        return {}
    try:
        predicates = json.loads(raw).get("predicates", [])
    except (ValueError, AttributeError) as exc:
        raise _HttpError(400, f"Invalid input error: invalid filter: {exc}") from exc
    out = {}
    for pred in predicates:
        if pred.get("operation") not in (1, "EQUALS"):
            raise _HttpError(400, "stand-in: only EQUALS filter predicates are implemented")
        value = pred.get("stringValue", pred.get("string_value"))
        out[pred["key"]] = value
    return out


def _pipeline_spec(data: bytes) -> dict[str, Any]:
    """The first YAML document of an uploaded file, which must be a KFP pipeline spec."""
    try:
        docs = [d for d in yaml.safe_load_all(data.decode("utf-8")) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _HttpError(400, f"Invalid input error: not a YAML file: {exc}", upload=True) from exc
    spec = docs[0] if docs else None
    if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
        raise _HttpError(
            400,
            "Invalid input error: the file is not a KFP pipeline spec (no pipelineInfo/root)",
            upload=True,
        )
    return spec


class KfpStandIn:
    """A loopback stand-in for the KFP v2beta1 API server (see the module docstring).

    Use as a context manager, or call :meth:`start` / :meth:`stop`; :attr:`host` is the URL to
    give ``kfp.Client(host=...)``.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        multi_user: bool = False,
        tag_name: str | None = "2.17.2",
        via_ui: bool = False,
    ) -> None:
        self.token = token
        self.multi_user = multi_user
        self.tag_name = tag_name
        """The backend release healthz reports; None = built without one (``unknown``)."""
        self.via_ui = via_ui
        """Answer healthz as the KFP UI's server does (the host is the UI, not the API)."""
        self.requests: list[RecordedRequest] = []
        self.pipelines: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, dict[str, Any]] = {}
        self.version_specs: dict[str, bytes] = {}
        self.experiments: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.recurring_runs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> KfpStandIn:
        """Listen on a free port of 127.0.0.1 in a background thread."""
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def setup(self) -> None:
                super().setup()
                with standin._lock:
                    standin._connections.add(self.connection)

            def finish(self) -> None:
                with standin._lock:
                    standin._connections.discard(self.connection)
                super().finish()

            def _handle(self) -> None:
                standin._dispatch(self)

            do_GET = do_POST = do_DELETE = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = False  # server_close joins the request threads
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            # Keep-alive connections the client still holds: end them, so their threads end.
            with self._lock:
                connections = list(self._connections)
            for conn in connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._server.server_close()
            self._server = None

    def __enter__(self) -> KfpStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self._server is not None, "not started"
        return self._server.server_address[1]

    @property
    def host(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        """The recorded requests with this method and path (path without the query)."""
        return [r for r in self.requests if r.method == method and r.path == path]

    # -- HTTP --------------------------------------------------------------------------------
    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "authorization"}
        req = RecordedRequest(
            method=handler.command,
            path=url.path,
            query=parse_qs(url.query, keep_blank_values=True),
            headers=headers,
            body=body,
        )
        if self.token is not None:
            req.authorized = handler.headers.get("Authorization") == f"Bearer {self.token}"
        with self._lock:
            self.requests.append(req)
            try:
                if self.token is not None and not req.authorized:
                    raise _HttpError(401, "Unauthenticated: missing or invalid bearer token")
                status, payload = self._route(req, handler.headers.get("Content-Type", ""))
            except _HttpError as err:
                status = err.status
                if err.upload:
                    payload = {"error_message": err.message, "error_details": err.message}
                else:
                    payload = {
                        "error": err.message,
                        "code": _GRPC_CODE.get(err.status, 2),
                        "message": err.message,
                        "details": [],
                    }
        data = json.dumps(payload).encode("utf-8")
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, req: RecordedRequest, content_type: str) -> tuple[int, Any]:
        m, p = req.method, req.path
        if m == "GET" and p in (f"{API}/healthz", "/apis/v1beta1/healthz"):
            return 200, self._healthz(v2=p.startswith(API))
        if m == "POST" and p == f"{API}/pipelines/upload":
            req.files = parse_multipart(content_type, req.body)
            return 200, self._upload_pipeline(req)
        if m == "POST" and p == f"{API}/pipelines/upload_version":
            req.files = parse_multipart(content_type, req.body)
            return 200, self._upload_version(req)
        if m == "GET" and p == f"{API}/pipelines":
            return 200, self._list_pipelines(req)
        if m == "GET" and (match := re.fullmatch(rf"{API}/pipelines/([^/]+)/versions", p)):
            return 200, self._list_versions(match.group(1))
        if m == "POST" and p == f"{API}/experiments":
            return 200, self._create_experiment(req.json())
        if m == "GET" and p == f"{API}/experiments":
            return 200, self._list_experiments(req)
        if m == "POST" and p == f"{API}/runs":
            return 200, self._create_run(req.json())
        if m == "GET" and (match := re.fullmatch(rf"{API}/runs/([^/]+)", p)):
            run = self.runs.get(match.group(1))
            if run is None:
                raise _HttpError(404, f"Run {match.group(1)} not found")
            return 200, run
        if m == "POST" and p == f"{API}/recurringruns":
            return 200, self._create_recurring_run(req.json())
        if m == "GET" and (match := re.fullmatch(rf"{API}/recurringruns/([^/]+)", p)):
            found = self.recurring_runs.get(match.group(1))
            if found is None:
                raise _HttpError(404, f"Recurring run {match.group(1)} not found")
            return 200, found
        raise _HttpError(404, f"stand-in: {m} {p} is not implemented")

    # -- resources ---------------------------------------------------------------------------
    def _healthz(self, *, v2: bool) -> dict[str, Any]:
        tag = self.tag_name if self.tag_name is not None else "unknown"
        commit = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c" if self.tag_name else "unknown"
        if self.via_ui:
            stats: dict[str, Any] = {
                "buildDate": "Tue Aug  5 00:00:00 UTC 2025",
                "frontendCommitHash": commit,
                "frontendTagName": tag,
                "apiServerReady": True,
                "apiServerCommitHash": commit,
                "apiServerTagName": tag,
                "apiServerMultiUser": self.multi_user,
                "multi_user": self.multi_user,
            }
            if v2:  # the API server's pipeline_store; undefined (left out) from v1beta1
                stats["pipelineStore"] = "database"
            return stats
        health: dict[str, Any] = {
            "commit_sha": commit,
            "tag_name": tag,
            "multi_user": self.multi_user,
        }
        if v2:
            health["pipeline_store"] = "database"
        return health

    def _upload_file(self, req: RecordedRequest, what: str) -> tuple[str, bytes]:
        if "uploadfile" not in req.files:
            raise _HttpError(400, f"Failed to {what}: no uploadfile part", upload=True)
        return req.files["uploadfile"]

    def _new_version(
        self, pipeline_id: str, name: str, description: str, data: bytes
    ) -> dict[str, Any]:
        spec = _pipeline_spec(data)
        version = {
            "pipeline_id": pipeline_id,
            "pipeline_version_id": str(uuid.uuid4()),
            "name": name,
            "display_name": name,
            "description": description,
            "created_at": _now(),
            "pipeline_spec": spec,
        }
        self.versions[version["pipeline_version_id"]] = version
        self.version_specs[version["pipeline_version_id"]] = data
        return version

    def _upload_pipeline(self, req: RecordedRequest) -> dict[str, Any]:
        filename, data = self._upload_file(req, "read pipeline from file")
        _pipeline_spec(data)
        name = req.param("display_name") or req.param("name") or filename
        namespace = req.param("namespace") or ""
        if self.multi_user and not namespace:
            raise _HttpError(400, "Invalid input error: namespace is required", upload=True)
        if not self.multi_user:
            namespace = ""
        if any(
            p["display_name"] == name and p["namespace"] == namespace
            for p in self.pipelines.values()
        ):
            raise _HttpError(409, "Failed to create a pipeline and a pipeline version", upload=True)
        pipeline = {
            "pipeline_id": str(uuid.uuid4()),
            "name": name,
            "display_name": name,
            "description": req.param("description") or "",
            "created_at": _now(),
            "namespace": namespace,
        }
        self.pipelines[pipeline["pipeline_id"]] = pipeline
        self._new_version(pipeline["pipeline_id"], name, pipeline["description"], data)
        return pipeline

    def _upload_version(self, req: RecordedRequest) -> dict[str, Any]:
        filename, data = self._upload_file(req, "create a pipeline version")
        pipeline_id = req.param("pipelineid") or ""
        if pipeline_id not in self.pipelines:
            raise _HttpError(400, "Failed to create a pipeline version", upload=True)
        name = req.param("display_name") or req.param("name") or filename
        if any(
            v["pipeline_id"] == pipeline_id and v["name"] == name for v in self.versions.values()
        ):
            raise _HttpError(409, "Failed to create a pipeline version", upload=True)
        return self._new_version(pipeline_id, name, req.param("description") or "", data)

    def _list_pipelines(self, req: RecordedRequest) -> dict[str, Any]:
        wanted = _filter_equals(req.param("filter"))
        namespace = req.param("namespace") or ""
        found = [
            p
            for p in self.pipelines.values()
            if all(p.get(k) == v for k, v in wanted.items())
            and (not self.multi_user or p["namespace"] == namespace)
        ]
        return {"pipelines": found, "total_size": len(found)} if found else {}

    def _list_versions(self, pipeline_id: str) -> dict[str, Any]:
        if pipeline_id not in self.pipelines:
            raise _HttpError(404, f"Pipeline {pipeline_id} not found")
        found = [v for v in self.versions.values() if v["pipeline_id"] == pipeline_id]
        found.reverse()  # newest first
        return {"pipeline_versions": found, "total_size": len(found)} if found else {}

    def _create_experiment(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("display_name") or ""
        if not name:
            raise _HttpError(400, "Invalid input error: experiment display_name is empty")
        namespace = (body.get("namespace") or "") if self.multi_user else ""
        if any(
            e["display_name"] == name and e["namespace"] == namespace
            for e in self.experiments.values()
        ):
            raise _HttpError(409, f"Already exist error: experiment {name!r} exists")
        experiment = {
            "experiment_id": str(uuid.uuid4()),
            "display_name": name,
            "description": body.get("description") or "",
            "created_at": _now(),
            "namespace": namespace,
            "storage_state": "AVAILABLE",
        }
        self.experiments[experiment["experiment_id"]] = experiment
        return experiment

    def _list_experiments(self, req: RecordedRequest) -> dict[str, Any]:
        wanted = _filter_equals(req.param("filter"))
        namespace = req.param("namespace") or ""
        found = [
            e
            for e in self.experiments.values()
            if all(e.get(k) == v for k, v in wanted.items())
            and (not self.multi_user or e["namespace"] == namespace)
        ]
        return {"experiments": found, "total_size": len(found)} if found else {}

    def _version_of(self, body: dict[str, Any], what: str) -> dict[str, Any] | None:
        """The version a run or recurring run refers to, after the checks the server makes of
        its experiment, its reference and its parameters."""
        experiment_id = body.get("experiment_id")
        if experiment_id and experiment_id not in self.experiments:
            raise _HttpError(404, f"Experiment {experiment_id} not found")
        ref = body.get("pipeline_version_reference") or {}
        version = self.versions.get(ref.get("pipeline_version_id", ""))
        if ref and (version is None or version["pipeline_id"] != ref.get("pipeline_id")):
            raise _HttpError(404, f"Pipeline version {ref.get('pipeline_version_id')} not found")
        spec = version["pipeline_spec"] if version else body.get("pipeline_spec")
        if not spec:
            raise _HttpError(400, f"Invalid input error: a {what} needs a pipeline version or spec")
        inputs = (
            spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
            if isinstance(spec, dict)
            else {}
        )
        params = (body.get("runtime_config") or {}).get("parameters") or {}
        for name in params:
            if name not in inputs:
                raise _HttpError(
                    400,
                    f"Failed to create a new {what}: Invalid input error: "
                    f"Unrecognized input parameter: {name}",
                )
        return version

    def _create_recurring_run(self, body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("display_name"):
            raise _HttpError(400, "Invalid input error: Recurring run's name cannot be empty")
        max_concurrency = int(body.get("max_concurrency") or 0)
        if not 1 <= max_concurrency <= 10:
            raise _HttpError(
                400,
                "Invalid input error: Max concurrency of a recurring run must be at least 1 and "
                f"at most 10. Received {max_concurrency}",
            )
        trigger = body.get("trigger") or {}
        cron = (trigger.get("cron_schedule") or {}).get("cron")
        if cron is not None:
            error = robfig_cron_parse(cron)
            if error:
                raise _HttpError(
                    400,
                    "Invalid input error: Schedule cron is not a supported format"
                    f"(https://godoc.org/github.com/robfig/cron). Error: {error}",
                )
        interval = (trigger.get("periodic_schedule") or {}).get("interval_second")
        if interval is not None and int(interval) < 1:
            raise _HttpError(
                400,
                f"Invalid input error: Found invalid period schedule interval {interval}. Set at "
                "interval to least 1 second",
            )
        version = self._version_of(body, "recurring run")
        experiment = self.experiments.get(body.get("experiment_id") or "")
        enabled = body.get("mode") == "ENABLE"
        recurring = {
            **body,
            "recurring_run_id": str(uuid.uuid4()),
            "max_concurrency": str(max_concurrency),  # int64: a string in protojson
            "mode": "ENABLE" if enabled else "DISABLE",
            "status": "ENABLED" if enabled else "DISABLED",
            "namespace": experiment["namespace"] if experiment else "",
            "no_catchup": bool(body.get("no_catchup")),
            "created_at": _now(),
            "updated_at": _now(),
        }
        if interval is not None:
            recurring["trigger"]["periodic_schedule"]["interval_second"] = str(interval)
        if version is not None:
            recurring["pipeline_version_id"] = version["pipeline_version_id"]
        self.recurring_runs[recurring["recurring_run_id"]] = recurring
        return recurring

    def _create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        experiment_id = body.get("experiment_id")
        version = self._version_of(body, "run")
        run = {
            **body,
            "run_id": str(uuid.uuid4()),
            "experiment_id": experiment_id or "",
            "storage_state": "AVAILABLE",
            "state": "PENDING",
            "created_at": _now(),
            "scheduled_at": _now(),
        }
        if version is not None:
            run["pipeline_version_id"] = version["pipeline_version_id"]
        self.runs[run["run_id"]] = run
        return run


# -- github.com/robfig/cron v1, as KFP's API server parses a recurring run's cron ----------------

_ROBFIG_DESCRIPTORS = {
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
}
_ROBFIG_FIELDS = (  # Second | Minute | Hour | Dom | Month | DowOptional
    (0, 59, {}),
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (
        1,
        12,
        {
            m: i + 1
            for i, m in enumerate(
                ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
            )
        },
    ),
    (0, 6, {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}),
)


def robfig_cron_parse(spec: str) -> str | None:
    """The error ``cron.Parse`` of github.com/robfig/cron v1.2 gives ``spec``, or None when it
    parses: a descriptor (``@daily``, ``@every <Go duration>``), or 5 or 6 whitespace-separated
    fields, seconds first, the day of the week optional (5 fields: second minute hour
    day-of-month month). A field is a comma list of ``*``, ``?``, ``N``, ``N-M``, each with an
    optional ``/step``; months and days of the week may be named."""
    if not spec:
        return "Empty spec string"
    if spec.startswith("@"):
        if spec in _ROBFIG_DESCRIPTORS:
            return None
        if spec.startswith("@every "):
            if re.fullmatch(r"(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+", spec[len("@every ") :]):
                return None
            return f"Failed to parse duration {spec}"
        return f"Unrecognized descriptor: {spec}"
    fields = spec.split()
    if not 5 <= len(fields) <= 6:
        return f"Expected 5 to 6 fields, found {len(fields)}: {spec}"
    for entry, (low, high, names) in zip(fields, _ROBFIG_FIELDS, strict=False):
        for part in entry.split(","):
            span, slash, step = part.partition("/")
            if slash and (not step.isdigit() or int(step) == 0):
                return f"Failed to parse int from {step}"
            if span in ("*", "?"):
                continue
            bounds = span.split("-")
            if len(bounds) > 2:
                return f"Too many hyphens: {part}"
            values = []
            for text in bounds:
                value = names.get(text.lower(), int(text) if text.isdigit() else None)
                if value is None:
                    return f"Failed to parse int from {text}"
                values.append(value)
            if values[0] < low:
                return f"Beginning of range ({values[0]}) below minimum ({low}): {entry}"
            if values[-1] > high:
                return f"End of range ({values[-1]}) above maximum ({high}): {entry}"
            if values[0] > values[-1]:
                return f"Beginning of range ({values[0]}) beyond end of range ({values[-1]})"
    return None
