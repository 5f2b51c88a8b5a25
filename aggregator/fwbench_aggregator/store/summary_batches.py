"""A run's summary as the catalog keeps it for reading many at once: its rows as one Arrow record batch, the schema
(with pandas' record of each column's dtype) kept once for every summary of that schema.

Why: a summary's Parquet file has over a hundred columns, and parsing its footer took a report 3 ms a run (30 s over
10,000 runs); a record batch of the same rows reads in a few microseconds and makes the same DataFrame (the catalog's
JSON rows would lose dtypes and digits). The batch is made from the summary as it was verified or written, in the
current format; the run's files stay the record, checked against their checksums whenever the batch is read. A
batch is kept compressed (zlib, fastest level): its layout, a hundred columns' buffers, is most of its 10 kB and
compresses to a tenth: the catalog of 10,000 runs takes 65 MB, not 170 (52 before it kept batches).
"""

from __future__ import annotations

import hashlib
import zlib

import pandas as pd
import pyarrow as pa


def encoded(summary: pd.DataFrame) -> tuple[str, bytes, bytes] | None:
    """(schema id, schema, record batch) of a summary's rows; None where Arrow cannot hold a column (mixed values:
    such a summary is read from its file)."""
    try:
        table = pa.Table.from_pandas(summary, preserve_index=False).combine_chunks()
    except (pa.ArrowException, ValueError, TypeError):
        return None
    schema = table.schema.serialize().to_pybytes()
    batches = table.to_batches()
    batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
    return hashlib.sha256(schema).hexdigest()[:32], schema, zlib.compress(batch.serialize().to_pybytes(), 1)


def decoded(schema: pa.Schema, batch: bytes) -> pa.Table:
    return pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(zlib.decompress(batch)), schema)])


def schema_of(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))
