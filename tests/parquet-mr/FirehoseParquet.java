// Writes Parquet files as Amazon Data Firehose's record format conversion does: with
// parquet-mr (the writer under Hive's ParquetHiveSerDe, which Firehose uses) and the
// ParquetSerDe settings given, a Hive table's physical types (strings as UTF8 byte
// arrays, bigint INT64, boolean, timestamps INT96 as Hive writes them).
//
// Used by weir's tests as an independent writer to hold weir's objects against
// (tests/tests/archive_parquet.rs): run with the jars tests/emulators/install.sh puts
// in $WEIR_EMULATORS_HOME/parquet-mr-1.13.1:
//
//   java -cp '<jars>/*' FirehoseParquet.java <columns> <codec> <dictionary> <in> <out>
//
// <columns> is `name:type,...` (types string, bigint, boolean, timestamp);
// <codec> SNAPPY, GZIP or UNCOMPRESSED; <dictionary> true or false
// (EnableDictionaryCompression). Each file `<in>/<name>.jsonl` (one JSON array of cells
// per row, in column order; a timestamp as epoch microseconds) becomes
// `<out>/<name>.parquet`. Other settings are Firehose's defaults: 256 MiB row groups,
// 1 MiB pages, writer version V1, no padding; no page checksums.
import java.io.*;
import java.nio.*;
import java.nio.file.*;
import java.util.*;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.column.ParquetProperties.WriterVersion;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.example.data.simple.SimpleGroupFactory;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.example.ExampleParquetWriter;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.PositionOutputStream;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.*;

public class FirehoseParquet {
  /** A local file as parquet-mr's output, without Hadoop's file systems. */
  record LocalFile(Path path) implements OutputFile {
    public PositionOutputStream create(long blockSizeHint) throws IOException {
      return createOrOverwrite(blockSizeHint);
    }

    public PositionOutputStream createOrOverwrite(long blockSizeHint) throws IOException {
      OutputStream out = new BufferedOutputStream(Files.newOutputStream(path));
      return new PositionOutputStream() {
        long pos = 0;

        public long getPos() {
          return pos;
        }

        public void write(int b) throws IOException {
          out.write(b);
          pos++;
        }

        public void write(byte[] b, int off, int len) throws IOException {
          out.write(b, off, len);
          pos += len;
        }

        public void close() throws IOException {
          out.close();
        }
      };
    }

    public boolean supportsBlockSize() {
      return false;
    }

    public long defaultBlockSize() {
      return 0;
    }
  }

  /** Hive's INT96 timestamp: nanoseconds of the day, then the Julian day, little-endian. */
  static Binary int96(long micros) {
    long day = Math.floorDiv(micros, 86_400_000_000L);
    long nanos = Math.floorMod(micros, 86_400_000_000L) * 1000;
    ByteBuffer b = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
    b.putLong(nanos).putInt((int) (day + 2_440_588));
    return Binary.fromConstantByteArray(b.array());
  }

  public static void main(String[] args) throws IOException {
    String[][] columns = Arrays.stream(args[0].split(",")).map(c -> c.split(":")).toArray(String[][]::new);
    CompressionCodecName codec = CompressionCodecName.valueOf(args[1]);
    boolean dictionary = Boolean.parseBoolean(args[2]);
    Path in = Paths.get(args[3]), out = Paths.get(args[4]);

    Types.MessageTypeBuilder builder = Types.buildMessage();
    for (String[] c : columns) {
      switch (c[1]) {
        case "string" -> builder.optional(PrimitiveType.PrimitiveTypeName.BINARY)
            .as(LogicalTypeAnnotation.stringType()).named(c[0]);
        case "bigint" -> builder.optional(PrimitiveType.PrimitiveTypeName.INT64).named(c[0]);
        case "boolean" -> builder.optional(PrimitiveType.PrimitiveTypeName.BOOLEAN).named(c[0]);
        case "timestamp" -> builder.optional(PrimitiveType.PrimitiveTypeName.INT96).named(c[0]);
        default -> throw new IllegalArgumentException("column type " + c[1]);
      }
    }
    MessageType schema = builder.named("hive_schema");
    SimpleGroupFactory rows = new SimpleGroupFactory(schema);
    ObjectMapper json = new ObjectMapper();

    List<Path> inputs;
    try (var list = Files.list(in)) {
      inputs = list.filter(p -> p.toString().endsWith(".jsonl")).sorted().toList();
    }
    for (Path input : inputs) {
      String name = input.getFileName().toString().replaceAll("\\.jsonl$", ".parquet");
      try (ParquetWriter<Group> writer = ExampleParquetWriter.builder(new LocalFile(out.resolve(name)))
              .withConf(new Configuration(false))
              .withType(schema)
              .withCompressionCodec(codec)
              .withRowGroupSize(256L << 20)
              .withPageSize(1 << 20)
              .withDictionaryPageSize(1 << 20)
              .withDictionaryEncoding(dictionary)
              .withWriterVersion(WriterVersion.PARQUET_1_0)
              .withMaxPaddingSize(0)
              // The parquet-mr of Hive 2 and 3 wrote no page checksums (nor the page
              // indexes, which 1.13 cannot leave out: the tests subtract their bytes).
              .withPageWriteChecksumEnabled(false)
              .build();
          BufferedReader lines = Files.newBufferedReader(input)) {
        for (String line; (line = lines.readLine()) != null; ) {
          JsonNode cells = json.readTree(line);
          Group row = rows.newGroup();
          for (int i = 0; i < columns.length; i++) {
            JsonNode cell = cells.get(i);
            if (cell == null || cell.isNull()) continue;
            switch (columns[i][1]) {
              case "string" -> row.add(i, cell.asText());
              case "bigint" -> row.add(i, cell.asLong());
              case "boolean" -> row.add(i, cell.asBoolean());
              default -> row.add(i, int96(cell.asLong()));
            }
          }
          writer.write(row);
        }
      }
    }
  }
}
