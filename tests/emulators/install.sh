#!/usr/bin/env bash
# Installs the pinned emulators weir's adapter tests run against, once, into
# $WEIR_EMULATORS_HOME (default ~/.cache/weir-emulators). Idempotent: each tool is
# installed only when the pinned version is missing.
#   ferrokinesis 0.7.0   (crates.io)  primary Kinesis, EFO with ChildShards
#   kinesis-local 0.6.2  (npm)        second Kinesis for EFO cross-checks
#   moto[server] 5.2.5   (PyPI, venv) DynamoDB and S3
#   s3s-fs 0.14.1        (crates.io)  second S3
#   amazon_kclpy 3.2.0   (PyPI sdist) KCL MultiLang peer: its unchanged sample processor
#   aws-kcl 2.3.2        (npm)        KCL MultiLang peer for Node.js processors
#   kcl-rs 0.1.4         (PyPI, venv) peer for the comparison bench (KCL v3 in Rust)
#   lifion-kinesis 1.3.3 (npm)        peer for the comparison bench
#   duckdb, python-snappy 0.7.3 (PyPI, venv) readers of the archive's objects
#   pyiceberg 0.12.0     (PyPI, venv) reader of weir's Iceberg tables (SQL catalog on SQLite, Glue);
#                                     iceberg-rest: a REST catalog over it (iceberg_rest.py)
#   parquet-mr 1.13.1    (PyPI: the jars in pyspark 3.5.3's sdist) Firehose's Parquet writer, run
#                                     by tests/parquet-mr/FirehoseParquet.java (needs a JDK: Java 17)
set -euo pipefail
HOME_DIR="${WEIR_EMULATORS_HOME:-$HOME/.cache/weir-emulators}"
mkdir -p "$HOME_DIR"
only="${1:-all}"

want() { [ "$only" = all ] || [ "$only" = "$1" ]; }

# The two emulators from crates.io compile from source (no prebuilt packages): both at
# once, in the background, while the Python and Node.js ones download. Without
# ferrokinesis's own `lto = true, codegen-units = 1` (an emulator gains nothing from
# them) its build takes about 3 minutes on 2 cores instead of several times that.
compiles=()
compile() {
  local crate=$1 root=$2
  shift 2
  echo "installing $crate (compiling)" >&2
  (
    export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
    cargo install --locked --quiet "$crate" --root "$root" "$@" \
      || cargo install --quiet "$crate" --root "$root" "$@"
  ) &
  compiles+=("$!:$crate")
}
if want ferrokinesis && ! [ -x "$HOME_DIR/ferrokinesis-0.7.0/bin/ferrokinesis" ]; then
  compile ferrokinesis@0.7.0 "$HOME_DIR/ferrokinesis-0.7.0"
fi
if want s3s-fs && ! [ -x "$HOME_DIR/s3s-fs-0.14.1/bin/s3s-fs" ]; then
  compile s3s-fs@0.14.1 "$HOME_DIR/s3s-fs-0.14.1" --features binary
fi

if want moto && ! [ -x "$HOME_DIR/moto-5.2.5/bin/moto_server" ]; then
  echo "installing moto[server] 5.2.5" >&2
  python3 -m venv "$HOME_DIR/moto-5.2.5"
  "$HOME_DIR/moto-5.2.5/bin/pip" install --quiet --disable-pip-version-check 'moto[server]==5.2.5'
fi

if want kinesis-local && ! [ -f "$HOME_DIR/kinesis-local-0.6.2/node_modules/kinesis-local/package.json" ]; then
  echo "installing kinesis-local 0.6.2" >&2
  mkdir -p "$HOME_DIR/kinesis-local-0.6.2"
  npm install --silent --no-audit --no-fund --prefix "$HOME_DIR/kinesis-local-0.6.2" kinesis-local@0.6.2
fi

if want duckdb && ! [ -x "$HOME_DIR/duckdb-py/bin/python" ]; then
  echo "installing duckdb (PyPI)" >&2
  python3 -m venv "$HOME_DIR/duckdb-py"
  "$HOME_DIR/duckdb-py/bin/pip" install --quiet --disable-pip-version-check duckdb
fi
# The readers of the archive's Snappy and Hadoop Snappy objects, beside DuckDB.
if want duckdb && ! "$HOME_DIR/duckdb-py/bin/python" -c "import snappy" 2>/dev/null; then
  echo "installing python-snappy 0.7.3 (PyPI)" >&2
  "$HOME_DIR/duckdb-py/bin/pip" install --quiet --disable-pip-version-check python-snappy==0.7.3
fi
# The reader of weir's Iceberg tables: pyiceberg's own SQL catalog over the SQLite file
# weir's catalog writes, and its own Parquet reader (pyarrow).
if { want pyiceberg || want iceberg-rest; } && ! "$HOME_DIR/pyiceberg-0.12.0/bin/python" -c "import pyiceberg.catalog.sql, pyiceberg.catalog.glue, boto3, pyarrow" 2>/dev/null; then
  echo "installing pyiceberg 0.12.0 (PyPI)" >&2
  python3 -m venv "$HOME_DIR/pyiceberg-0.12.0"
  "$HOME_DIR/pyiceberg-0.12.0/bin/pip" install --quiet --disable-pip-version-check 'pyiceberg[sql-sqlite,pyarrow,glue]==0.12.0'
fi
# Firehose's Parquet writer (parquet-mr, under Hive's ParquetHiveSerDe) for the tests
# that hold weir's Parquet objects against it. Maven Central is not among the registries
# CI reaches; pyspark's sdist on PyPI carries the jars. Only parquet-mr's, Hadoop's
# client (its Configuration) and what they load are kept (59 MB of 317).
parquet_mr_jars="parquet-column-1.13.1 parquet-common-1.13.1 parquet-encoding-1.13.1
  parquet-format-structures-1.13.1 parquet-hadoop-1.13.1 parquet-jackson-1.13.1
  hadoop-client-api-3.3.4 hadoop-client-runtime-3.3.4 snappy-java-1.1.10.5
  jackson-core-2.15.2 jackson-databind-2.15.2 jackson-annotations-2.15.2
  slf4j-api-2.0.7 commons-logging-1.1.3"
if want parquet-mr && ! [ -f "$HOME_DIR/parquet-mr-1.13.1/parquet-hadoop-1.13.1.jar" ]; then
  echo "installing parquet-mr 1.13.1 (the jars of pyspark 3.5.3's sdist)" >&2
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$tmp" pyspark==3.5.3
  members=()
  for jar in $parquet_mr_jars; do members+=("pyspark-3.5.3/deps/jars/$jar.jar"); done
  tar -xzf "$tmp"/pyspark-3.5.3.tar.gz -C "$tmp" "${members[@]}"
  mkdir -p "$HOME_DIR/parquet-mr-1.13.1.part"
  mv "$tmp"/pyspark-3.5.3/deps/jars/*.jar "$HOME_DIR/parquet-mr-1.13.1.part/"
  rm -rf "$tmp" "$HOME_DIR/parquet-mr-1.13.1"
  mv "$HOME_DIR/parquet-mr-1.13.1.part" "$HOME_DIR/parquet-mr-1.13.1"
fi
# FirehoseParquet.java runs as a single-file source program: a JDK, not only a JRE.
if want parquet-mr && ! { command -v java >/dev/null 2>&1 && java --list-modules 2>/dev/null | grep -q '^jdk.compiler'; }; then
  echo "installing a JDK (Debian's default-jdk-headless)" >&2
  { apt-get install -y -qq --no-install-recommends default-jdk-headless >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 \
      && apt-get install -y -qq --no-install-recommends default-jdk-headless >/dev/null; }; }
fi

# KCL MultiLang peers: the amazon_kclpy sources (its sample application unchanged),
# unpacked without setup.py, which would download the KCL jars weir does not need.
if want kclpy && ! [ -f "$HOME_DIR/amazon_kclpy-3.2.0/samples/sample_kclpy_app.py" ]; then
  echo "installing amazon_kclpy 3.2.0 sources" >&2
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$tmp" amazon-kclpy==3.2.0
  tar -xzf "$tmp"/amazon_kclpy-3.2.0.tar.gz -C "$HOME_DIR"
  rm -rf "$tmp"
fi

if want aws-kcl && ! [ -f "$HOME_DIR/aws-kcl-2.3.2/node_modules/aws-kcl/package.json" ]; then
  echo "installing aws-kcl 2.3.2" >&2
  mkdir -p "$HOME_DIR/aws-kcl-2.3.2"
  npm install --silent --no-audit --no-fund --prefix "$HOME_DIR/aws-kcl-2.3.2" aws-kcl@2.3.2
fi

if want kcl-rs && ! [ -x "$HOME_DIR/kcl-rs-0.1.4/bin/python" ]; then
  echo "installing kcl-rs 0.1.4" >&2
  python3 -m venv "$HOME_DIR/kcl-rs-0.1.4"
  "$HOME_DIR/kcl-rs-0.1.4/bin/pip" install --quiet --disable-pip-version-check 'kcl-rs==0.1.4'
fi

if want lifion && ! [ -f "$HOME_DIR/lifion-kinesis-1.3.3/node_modules/lifion-kinesis/package.json" ]; then
  echo "installing lifion-kinesis 1.3.3" >&2
  mkdir -p "$HOME_DIR/lifion-kinesis-1.3.3"
  npm install --silent --no-audit --no-fund --prefix "$HOME_DIR/lifion-kinesis-1.3.3" lifion-kinesis@1.3.3
fi

for job in "${compiles[@]}"; do
  if ! wait "${job%%:*}"; then
    echo "installing ${job#*:} failed" >&2
    exit 1
  fi
done
echo "emulators ready in $HOME_DIR" >&2
