"""The Tinker protocol's binary messages: ``forward_backward`` requests arrive as protobuf (optionally zstd), and
the results of ``forward_backward`` and ``sample`` go back as protobuf. The schema is the ``tinker`` SDK's own
(``tinker.proto.tinker_public_pb2``; ``pip install 'twinkle-core[tinker]'``), so the two sides cannot drift."""

from __future__ import annotations

from typing import Any

import numpy as np

from twinkle_core.errors import TwinkleError
from twinkle_core.lowlevel import Datum, ForwardResult, PromptScores, Sequence

_DTYPES = {1: np.float32, 2: np.int64, 3: np.int32}
PROTOBUF = "application/x-protobuf"
"""The content type of protobuf bodies."""


def schema() -> Any:
    """The SDK's compiled schema module.

    Raises:
        TwinkleError: the ``tinker`` package is not installed (the server's ``--tinker`` needs it).
    """
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError:
        raise TwinkleError("the Tinker API needs the tinker package for its wire schema: pip install "
                           "'twinkle-core[tinker]'") from None
    return tinker_public_pb2


def _tensor(message: Any, where: str) -> np.ndarray:
    """A protobuf ``Tensor`` (dense, or CSR with zeros elsewhere) as a numpy array."""
    dtype = _DTYPES.get(int(message.dtype))
    if dtype is None:
        raise TwinkleError(f"{where} has dtype {int(message.dtype)}; send float32 or int64 tensors")
    shape = [int(n) for n in message.shape]
    if message.WhichOneof("encoding") == "sparse_csr":
        csr = message.sparse_csr
        values = np.frombuffer(csr.values, dtype)
        rows = np.frombuffer(csr.crow_indices, np.int64)
        columns = np.frombuffer(csr.col_indices, np.int64)
        dense = np.zeros(shape, dtype)
        for row in range(len(rows) - 1):
            dense[row, columns[rows[row]:rows[row + 1]]] = values[rows[row]:rows[row + 1]]
        return dense
    values = np.frombuffer(message.dense, dtype)
    return values.reshape(shape) if shape else values


def read_forward_backward(body: bytes, encoding: str | None) -> dict[str, Any]:
    """A ``ForwardBackwardRequest`` body as ``model_id``, ``seq_id``, ``loss_fn``, ``loss_fn_config``,
    ``forward_only`` and ``data`` (``Datum`` values).

    Raises:
        TwinkleError: a body that is not the message, or a datum with a chunk Twinkle cannot read (images).
    """
    if encoding == "zstd":
        import zstandard

        body = zstandard.ZstdDecompressor().decompress(body)
    message = schema().ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except Exception as err:  # noqa: BLE001 — protobuf's DecodeError
        raise TwinkleError(f"the forward_backward body is not a ForwardBackwardRequest ({err})") from None
    data = []
    for i, datum in enumerate(message.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise TwinkleError(f"data[{i}].model_input has a {chunk.WhichOneof('chunk')} chunk; this server "
                                   "trains on token ids (encoded_text) only")
            tokens.extend(int(t) for t in np.frombuffer(chunk.encoded_text.tokens, np.int32))
        inputs = {str(key): _tensor(value, f"data[{i}].loss_fn_inputs['{key}']")
                  for key, value in datum.loss_fn_inputs.items()}
        data.append(Datum(tokens, inputs))
    config: dict[str, Any] = {str(k): float(v) for k, v in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        config[str(key)] = value.number if value.WhichOneof("value") == "number" else value.text
    return {"model_id": message.model_id, "seq_id": int(message.seq_id), "loss_fn": message.loss_fn,
            "loss_fn_config": config, "forward_only": bool(message.forward_only), "data": data}


def forward_output(result: ForwardResult) -> bytes:
    """A ``ForwardBackwardOutput``: one record of every datum's outputs (float32, concatenated, byte offsets)."""
    pb = schema()
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    record = message.loss_fn_outputs.add(type_tag="ArrayRecord", num_datums=len(result.outputs))
    names = sorted({name for output in result.outputs for name in output})
    for name in names:
        arrays = [np.ascontiguousarray(output[name], dtype=np.float32).reshape(-1) for output in result.outputs]
        offsets = np.cumsum([0, *[a.nbytes for a in arrays]]).astype(np.int64)
        batched = record.fields[name]
        batched.data = b"".join(a.tobytes() for a in arrays)
        batched.offsets = offsets.tobytes()
        batched.dtype = pb.DTYPE_FLOAT32
    for key, value in result.metrics.items():
        message.metrics[key] = float(value)
    return message.SerializeToString()


MASK_LOGPROB = -99999.0
"""The SDK's filler of a top-k row without a score (token 0 at this log-probability: ``tinker.types.TopkLogprobs``)."""


def _top(message: Any, rows: list[list[tuple[int, float]] | None]) -> None:
    """Fill a ``TopkLogprobs`` message: ``rows`` as ``[length, k]`` int32 ids and float32 log-probabilities, a row
    without scores (``None``) or a short one filled with the SDK's mask."""
    k = max((len(row) for row in rows if row), default=0)
    ids = np.zeros((len(rows), k), np.int32)
    values = np.full((len(rows), k), MASK_LOGPROB, np.float32)
    for i, row in enumerate(rows):
        for j, (token, logprob) in enumerate(row or []):
            ids[i, j], values[i, j] = token, logprob
    message.length, message.k = len(rows), k
    message.token_ids, message.logprobs = ids.tobytes(), values.tobytes()


def sample_output(sequences: list[Sequence], scores: PromptScores | None) -> bytes:
    """A ``SampleResponse``: each sequence's tokens (int32), log-probabilities (float32), stop reason and, when
    asked for, top tokens; the prompt's log-probabilities (NaN where there is none) and top tokens when asked for."""
    pb = schema()
    message = pb.SampleResponse()
    for sequence in sequences:
        added = message.sequences.add(
            stop_reason=pb.STOP_REASON_STOP if sequence.stop_reason == "stop" else pb.STOP_REASON_LENGTH,
            tokens=np.asarray(sequence.tokens, np.int32).tobytes(),
            logprobs=np.asarray(sequence.logprobs, np.float32).tobytes())
        if sequence.top is not None:
            _top(added.topk_sampled_logprobs, list(sequence.top))
    if scores is not None and scores.logprobs is not None:
        message.prompt_logprobs = np.asarray(scores.logprobs, np.float32).tobytes()
    if scores is not None and scores.top is not None:
        _top(message.topk_prompt_logprobs, scores.top)
    return message.SerializeToString()
