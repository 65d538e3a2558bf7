package io.metaservice.spark;

import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.column.ColumnDescriptor;
import org.apache.parquet.column.ColumnWriteStore;
import org.apache.parquet.column.ColumnWriter;
import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.compression.CompressionCodecFactory.BytesInputCompressor;
import org.apache.parquet.hadoop.CodecFactory;
import org.apache.parquet.hadoop.ColumnChunkPageWriteStore;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.io.ColumnIOFactory;
import org.apache.parquet.io.OutputFile;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.io.api.RecordConsumer;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName;
import org.apache.parquet.schema.Type;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Spark's rows written as one Parquet file laid out as a {@link ParquetLayout} says: the file
 * Spark's {@link ParquetWriteSupport} behind a {@link ParquetWriter} writes with those settings
 * (its schema, field ids, footer metadata, pages, row groups, dictionaries, bloom filters,
 * codec). Mirrors parquet-mr's {@code InternalParquetRecordWriter}, with two ways from a row to
 * its columns. Rows of a flat schema (top-level columns of primitive types only, {@link
 * #kinds}) go straight into parquet-mr's column writers, without the record consumer between a
 * row and its columns where Spark's writer spends about a third of its time on a narrow row;
 * their values are written as Spark writes them with {@code
 * spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS}, no legacy format and no calendar
 * rebase (Iceberg's dates and timestamps are proleptic Gregorian). Other rows go through
 * {@link ParquetWriteSupport} and that record consumer, as in Spark's writer.
 */
final class ParquetRowWriter implements java.io.Closeable {
  private static final int BOOLEAN = 0;
  private static final int BYTE = 1;
  private static final int SHORT = 2;
  private static final int INT = 3;
  private static final int LONG = 4;
  private static final int FLOAT = 5;
  private static final int DOUBLE = 6;
  private static final int STRING = 7;
  private static final int BINARY = 8;
  private static final int DECIMAL_INT = 9;
  private static final int DECIMAL_LONG = 10;

  private final ParquetWriteSupport support;
  private final ParquetFileWriter file;
  private final MessageType schema;
  private final Map<String, String> footerMetadata;
  private final ParquetProperties properties;
  private final CodecFactory codecs;
  private final BytesInputCompressor compressor;
  private final long rowGroupBytes;
  private final int[] kinds;
  private final int[] maxDefinition;
  private final int[] precision;
  private final int[] scale;
  private ColumnChunkPageWriteStore pages;
  private ColumnWriteStore columns;
  private ColumnWriter[] writers;
  private RecordConsumer consumer;
  private int rowGroupOrdinal;
  private long rows;
  private long nextSizeCheck;
  private long nextRowGroupBytes;
  private long lastRowGroupEnd;
  private boolean closed;
  private boolean aborted;

  /**
   * The write kind of each column of {@code spark} as {@code parquet} lays it out, or null when
   * a column is nested or of a type (or physical layout) this writer does not write.
   */
  static int[] kinds(StructType spark, MessageType parquet) {
    StructField[] fields = spark.fields();
    if (parquet.getFieldCount() != fields.length || parquet.getColumns().size() != fields.length) {
      return null;
    }
    int[] kinds = new int[fields.length];
    for (int i = 0; i < fields.length; i++) {
      Type column = parquet.getType(i);
      if (!column.isPrimitive()) {
        return null;
      }
      PrimitiveTypeName physical = column.asPrimitiveType().getPrimitiveTypeName();
      DataType type = fields[i].dataType();
      int kind = kindOf(type, physical);
      if (kind < 0) {
        return null;
      }
      kinds[i] = kind;
    }
    return kinds;
  }

  private static int kindOf(DataType type, PrimitiveTypeName physical) {
    if (type instanceof BooleanType) {
      return physical == PrimitiveTypeName.BOOLEAN ? BOOLEAN : -1;
    }
    if (type instanceof ByteType || type instanceof ShortType || type instanceof IntegerType
        || type instanceof DateType) {
      if (physical != PrimitiveTypeName.INT32) {
        return -1;
      }
      return type instanceof ByteType ? BYTE : type instanceof ShortType ? SHORT : INT;
    }
    if (type instanceof LongType || type instanceof TimestampType || type instanceof TimestampNTZType) {
      return physical == PrimitiveTypeName.INT64 ? LONG : -1;  // an INT96 timestamp is not
    }
    if (type instanceof FloatType) {
      return physical == PrimitiveTypeName.FLOAT ? FLOAT : -1;
    }
    if (type instanceof DoubleType) {
      return physical == PrimitiveTypeName.DOUBLE ? DOUBLE : -1;
    }
    if (type instanceof StringType) {
      return physical == PrimitiveTypeName.BINARY ? STRING : -1;
    }
    if (type instanceof BinaryType) {
      return physical == PrimitiveTypeName.BINARY ? BINARY : -1;
    }
    if (type instanceof DecimalType) {
      return physical == PrimitiveTypeName.INT32 ? DECIMAL_INT
          : physical == PrimitiveTypeName.INT64 ? DECIMAL_LONG : -1;
    }
    return -1;
  }

  /**
   * The writer of {@code out}, for rows of the schema Spark's {@link ParquetWriteSupport} reads
   * from {@code conf} (with the rest of its settings).
   */
  ParquetRowWriter(OutputFile out, Configuration conf, ParquetLayout layout) throws IOException {
    this.support = new ParquetWriteSupport();
    WriteSupport.WriteContext context = support.init(conf);
    StructType spark = (StructType) DataType.fromJson(conf.get(ParquetWriteSupport.SPARK_ROW_SCHEMA()));
    this.schema = context.getSchema();
    this.kinds = kinds(spark, schema);
    this.footerMetadata = new HashMap<>(context.getExtraMetaData());
    String model = support.getName();
    if (model != null) {
      this.footerMetadata.put(ParquetWriter.OBJECT_MODEL_NAME_PROP, model);
    }
    this.properties = layout.properties();
    this.rowGroupBytes = layout.rowGroupBytes;
    int columnCount = schema.getColumns().size();
    List<ColumnDescriptor> descriptors = schema.getColumns();
    this.maxDefinition = new int[columnCount];
    this.precision = new int[columnCount];
    this.scale = new int[columnCount];
    for (int i = 0; kinds != null && i < kinds.length; i++) {
      maxDefinition[i] = descriptors.get(i).getMaxDefinitionLevel();
      if (spark.fields()[i].dataType() instanceof DecimalType decimal) {
        precision[i] = decimal.precision();
        scale[i] = decimal.scale();
      }
    }
    this.file = new ParquetFileWriter(out, schema, ParquetFileWriter.Mode.CREATE, rowGroupBytes,
        ParquetWriter.MAX_PADDING_SIZE_DEFAULT, null, properties);
    this.codecs = new CodecFactory(conf, properties.getPageSizeThreshold());
    this.compressor = codecs.getCompressor(layout.codec);
    this.nextRowGroupBytes = rowGroupBytes;
    file.start();
    startRowGroup();
  }

  private void startRowGroup() {
    pages = new ColumnChunkPageWriteStore(compressor, schema, properties.getAllocator(),
        properties.getColumnIndexTruncateLength(), properties.getPageWriteChecksumEnabled(),
        null, rowGroupOrdinal);
    columns = properties.newColumnWriteStore(schema, pages, pages);
    if (kinds == null) {
      consumer = new ColumnIOFactory(false).getColumnIO(schema).getRecordWriter(columns);
      support.prepareForWrite(consumer);
    } else {
      writers = new ColumnWriter[kinds.length];
      List<ColumnDescriptor> descriptors = schema.getColumns();
      for (int i = 0; i < writers.length; i++) {
        writers[i] = columns.getColumnWriter(descriptors.get(i));
      }
    }
    nextSizeCheck = properties.getMinRowCountForPageSizeCheck();
  }

  void write(InternalRow row) throws IOException {
    try {
      if (kinds == null) {
        support.write(row);  // its record consumer ends the record in the column store
      } else {
        writeColumns(row);
        columns.endRecord();
      }
      rows++;
      checkRowGroupSize();
    } catch (Throwable failed) {
      aborted = true;
      throw failed;
    }
  }

  private void writeColumns(InternalRow row) {
    for (int i = 0; i < kinds.length; i++) {
      ColumnWriter column = writers[i];
      int defined = maxDefinition[i];
      if (row.isNullAt(i)) {
        if (defined == 0) {
          throw new IllegalArgumentException("null in required column " + schema.getFieldName(i));
        }
        column.writeNull(0, 0);
        continue;
      }
      switch (kinds[i]) {
        case BOOLEAN -> column.write(row.getBoolean(i), 0, defined);
        case BYTE -> column.write((int) row.getByte(i), 0, defined);
        case SHORT -> column.write((int) row.getShort(i), 0, defined);
        case INT -> column.write(row.getInt(i), 0, defined);
        case LONG -> column.write(row.getLong(i), 0, defined);
        case FLOAT -> column.write(row.getFloat(i), 0, defined);
        case DOUBLE -> column.write(row.getDouble(i), 0, defined);
        case STRING -> column.write(Binary.fromReusedByteArray(row.getUTF8String(i).getBytes()), 0, defined);
        case BINARY -> column.write(Binary.fromReusedByteArray(row.getBinary(i)), 0, defined);
        case DECIMAL_INT -> column.write(
            (int) row.getDecimal(i, precision[i], scale[i]).toUnscaledLong(), 0, defined);
        case DECIMAL_LONG -> column.write(
            row.getDecimal(i, precision[i], scale[i]).toUnscaledLong(), 0, defined);
        default -> throw new IllegalStateException("unknown column kind " + kinds[i]);
      }
    }
  }

  /** As {@code InternalParquetRecordWriter.checkBlockSizeReached}. */
  private void checkRowGroupSize() throws IOException {
    if (rows >= properties.getRowGroupRowCountLimit()) {
      flushRowGroup();
      return;
    }
    if (rows < nextSizeCheck) {
      return;
    }
    // parquet-mr's arithmetic to the letter, a row of under a byte (0 here) included
    long buffered = columns.getBufferedSize();
    long rowBytes = buffered / rows;
    if (buffered > (nextRowGroupBytes - 2 * rowBytes)) {
      flushRowGroup();
    } else {
      nextSizeCheck = Math.min(
          Math.max(properties.getMinRowCountForPageSizeCheck(),
              (rows + (long) (nextRowGroupBytes / ((float) rowBytes))) / 2),
          rows + properties.getMaxRowCountForPageSizeCheck());
    }
  }

  private void flushRowGroup() throws IOException {
    try {
      if (consumer != null) {
        consumer.flush();
      }
      if (rows > 0) {
        rowGroupOrdinal++;
        file.startBlock(rows);
        columns.flush();
        pages.flushToFileWriter(file);
        rows = 0;
        file.endBlock();
        nextRowGroupBytes = Math.min(file.getNextRowGroupSize(), rowGroupBytes);
      }
    } finally {
      columns.close();
      pages.close();
    }
    lastRowGroupEnd = file.getPos();
    if (!closed) {
      startRowGroup();  // (parquet-mr checks the next one's size after its minimum of rows)
    }
  }

  /** The bytes written so far and buffered for the current row group. */
  long dataSize() {
    return lastRowGroupEnd + columns.getBufferedSize();
  }

  @Override
  public void close() throws IOException {
    if (closed) {
      return;
    }
    closed = true;
    try {
      if (aborted) {  // a failed write's file is thrown away: no footer
        columns.close();
        pages.close();
        file.abort();
      } else {
        flushRowGroup();
        Map<String, String> metadata = new HashMap<>(footerMetadata);
        metadata.putAll(support.finalizeWrite().getExtraMetaData());
        file.end(metadata);
      }
    } finally {
      codecs.release();
    }
  }
}
