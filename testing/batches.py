"""The batch side of ``OpenAIStub``: files and batches as OpenAI's Batch API serves them.

A batch goes ``validating``, ``in_progress``, then ``completed`` once ``batch_seconds`` have
passed since its creation; then every line is answered by the stub's brain as a direct
request would be, into an output file (200 lines) and an error file (the rest). Batches live
as long as the stub, so a client killed while polling finds its batch again.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import protocol
from .brain import classify
from .faults import error_body

if TYPE_CHECKING:
    from .server import OpenAIStub


@dataclass
class StoredFile:
    """An uploaded or generated file."""

    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def describe(self) -> dict[str, Any]:
        """The file object the API returns."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass
class StoredBatch:
    """A batch and, once it completed, its output and error files."""

    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    created: float
    total: int
    output_file_id: str | None = None
    error_file_id: str | None = None
    completed: int = 0
    failed: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def status(self, now: float, seconds: float) -> str:
        """Where the batch stands ``now``."""
        if self.output_file_id is not None or self.error_file_id is not None:
            return "completed"
        if now - self.created >= seconds:
            return "finalizing"
        return "in_progress" if now - self.created > seconds / 3 else "validating"

    def describe(self, status: str) -> dict[str, Any]:
        """The batch object the API returns."""
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created),
            "completed_at": int(time.time()) if status == "completed" else None,
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
            "errors": None,
        }


class BatchStore:
    """Files and batches of one stub."""

    def __init__(self) -> None:
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, StoredBatch] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _id(self, prefix: str) -> str:
        return f"{prefix}-stub{next(self._ids):04d}"

    def upload(self, content_type: str, raw: bytes) -> dict[str, Any]:
        """``POST /v1/files``: a multipart body with ``purpose`` and ``file``."""
        if not content_type.startswith("multipart/form-data"):
            raise protocol.HTTPError(400, "files must be uploaded as multipart/form-data")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + raw
        )
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields[name] = (part.get_filename(), payload)
        if fields.get("purpose", (None, b""))[1] != b"batch" or "file" not in fields:
            raise protocol.HTTPError(400, "expected a 'file' and purpose 'batch'")
        filename, data = fields["file"]
        with self._lock:
            return self._keep(filename or "upload.jsonl", "batch", data).describe()

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/batches``."""
        file_id = body.get("input_file_id")
        if body.get("endpoint") != "/v1/chat/completions":
            raise protocol.HTTPError(400, "this stub batches /v1/chat/completions only")
        if body.get("completion_window") != "24h":
            raise protocol.HTTPError(400, "completion_window must be '24h'")
        with self._lock:
            stored = self.files.get(str(file_id))
            if stored is None:
                raise protocol.HTTPError(404, f"No such File object: {file_id}")
            lines = [line for line in stored.data.decode("utf-8").split("\n") if line.strip()]
            batch = StoredBatch(
                id=self._id("batch"),
                input_file_id=stored.id,
                endpoint=str(body["endpoint"]),
                completion_window="24h",
                created=time.monotonic(),
                total=len(lines),
                metadata=dict(body.get("metadata") or {}),
            )
            self.batches[batch.id] = batch
        return batch.describe("validating")

    def retrieve(self, stub: OpenAIStub, batch_id: str) -> dict[str, Any]:
        """``GET /v1/batches/{id}``; the batch is answered when its time has come."""
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                raise protocol.HTTPError(404, f"No such Batch object: {batch_id}")
            status = batch.status(time.monotonic(), stub.batch_seconds)
            if status == "finalizing":
                self._answer(stub, batch)
                status = "completed"
            return batch.describe(status)

    def content(self, file_id: str) -> bytes:
        """``GET /v1/files/{id}/content``."""
        with self._lock:
            stored = self.files.get(file_id)
        if stored is None:
            raise protocol.HTTPError(404, f"No such File object: {file_id}")
        return stored.data

    def _answer(self, stub: OpenAIStub, batch: StoredBatch) -> None:
        """Answer every line with the brain; called once, holding the lock."""
        output: list[str] = []
        errors: list[str] = []
        data = self.files[batch.input_file_id].data.decode("utf-8")
        for number, raw in enumerate(line for line in data.split("\n") if line.strip()):
            request = json.loads(raw)
            custom_id = request.get("custom_id")
            status, body = answer_line(stub, request, f"{batch.id}-{number}")
            line = {
                "id": f"batch_req_{batch.id}_{number}",
                "custom_id": custom_id,
                "response": {"status_code": status, "request_id": f"req-{number}", "body": body},
                "error": None,
            }
            (output if status == 200 else errors).append(json.dumps(line))
        batch.output_file_id = self._keep_lines(batch, "output", output)
        batch.error_file_id = self._keep_lines(batch, "error", errors)
        batch.completed, batch.failed = len(output), len(errors)

    def _keep(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        """A new stored file; the caller holds the lock."""
        stored = StoredFile(self._id("file"), filename, purpose, data, int(time.time()))
        self.files[stored.id] = stored
        return stored

    def _keep_lines(self, batch: StoredBatch, kind: str, lines: list[str]) -> str | None:
        if not lines:
            return None
        data = ("\n".join(lines) + "\n").encode("utf-8")
        return self._keep(f"batch_{batch.id}_{kind}.jsonl", "batch_output", data).id


def answer_line(stub: OpenAIStub, request: dict[str, Any], response_id: str) -> tuple[int, Any]:
    """One batch line answered as the direct request would be (status and body)."""
    body = request.get("body")
    try:
        if request.get("url") != "/v1/chat/completions" or not isinstance(body, dict):
            raise protocol.HTTPError(400, "each line must POST a body to /v1/chat/completions")
        model = protocol.model_of(body)
        prompt = protocol.chat_prompt(body)
        reply = stub.brain.chat(classify(prompt), model, prompt, body)
    except protocol.HTTPError as exc:
        return exc.status, error_body(exc.status, exc.message)
    except Exception as exc:  # a brain that cannot answer: a 500 for that line
        return 500, error_body(500, f"{type(exc).__name__}: {exc}")
    completion = protocol.chat_completion(
        reply, model, prompt, f"chatcmpl-{response_id}", stream=False, usage_chunk=False
    )
    return 200, completion
