"""Reads an Iceberg table with pyiceberg, independently of weir, and prints what it holds.

    iceberg_read.py CATALOG_URI WAREHOUSE NAMESPACE.TABLE [--s3 ENDPOINT] [--partitions]

CATALOG_URI is SQLAlchemy's (`sqlite:////path/catalog.db`, `postgresql+psycopg2://...`), the
catalog named `weir`. Prints one JSON object:
  rows:       every row of the current snapshot (timestamps as epoch milliseconds),
  snapshots:  each snapshot's summary, oldest first,
  files:      the data files the current snapshot references,
  stored:     every file under the table's data/ directory (referenced or not),
  partitions: with --partitions, for each data file whether every row's partition value,
              computed here by pyiceberg's own transforms, equals the file's partition.
"""

import datetime
import json
import sys

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog


def plain(value):
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


def main():
    args = sys.argv[1:]
    uri, warehouse, name = args[0], args[1], args[2]
    props = {"uri": uri, "warehouse": warehouse}
    s3 = None
    if "--s3" in args:
        s3 = args[args.index("--s3") + 1]
        props.update({
            "s3.endpoint": s3,
            "s3.access-key-id": "test",
            "s3.secret-access-key": "test",
            "s3.region": "us-east-1",
        })
    catalog = SqlCatalog("weir", **props)
    table = catalog.load_table(name)
    out = {"rows": [], "snapshots": [], "files": [], "stored": []}
    for snap in table.snapshots():
        out["snapshots"].append(dict(snap.summary.additional_properties))
    arrow = table.scan().to_arrow()
    for row in arrow.to_pylist():
        out["rows"].append({k: plain(v) for k, v in row.items()})
    tasks = list(table.scan().plan_files())
    out["files"] = sorted(t.file.file_path for t in tasks)
    io = table.io
    data = table.metadata.location.rstrip("/") + "/data"
    if data.startswith("s3://"):
        fs = pafs.S3FileSystem(endpoint_override=s3, access_key="test", secret_key="test",
                               region="us-east-1", scheme="http")
        root, head = data[len("s3://"):], "s3://"
    else:
        fs = pafs.LocalFileSystem()
        root = data[len("file://"):] if data.startswith("file://") else data
        head = "file://"
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        out["stored"] = sorted(head + i.path for i in infos if i.type == pafs.FileType.File)
    except FileNotFoundError:
        pass
    if "--partitions" in args:
        spec = table.spec()
        schema = table.schema()
        checks = []
        for t in tasks:
            path = t.file.file_path
            local = path[len("file://"):] if path.startswith("file://") else path
            rows = pq.read_table(local if not path.startswith("s3://") else path[len("s3://"):],
                                 filesystem=fs).to_pylist()
            ok = True
            for i, field in enumerate(spec.fields):
                source = schema.find_field(field.source_id)
                fn = field.transform.transform(source.field_type)
                want = t.file.partition[i]
                for r in rows:
                    v = r[source.name]
                    if isinstance(v, datetime.datetime):
                        # pyiceberg's time transforms take microseconds since the epoch.
                        if v.tzinfo is None:
                            v = v.replace(tzinfo=datetime.timezone.utc)
                        v = int(v.timestamp() * 1_000_000)
                    if fn(v) != want:
                        ok = False
            checks.append({"file": path, "rows": len(rows), "ok": ok,
                           "partition": [plain(p) for p in t.file.partition]})
        out["partitions"] = checks
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
