package io.metaservice.spark;

import java.util.Locale;
import java.util.Map;

import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;

/**
 * How a table's data files are laid out, from its Iceberg properties and with Iceberg's
 * defaults (Iceberg's {@code TableProperties}, as its own Parquet writer reads them): codec and
 * level, row-group, page and dictionary sizes, rows per page, and the size at which a file
 * rolls over. Serializable: the write's closure carries it to the tasks.
 */
final class ParquetLayout implements java.io.Serializable {
  private static final long serialVersionUID = 1L;

  final CompressionCodecName codec;
  /** The codec's level as parquet-mr's codecs read it (key, value), or null. */
  final String[] codecLevel;
  final long rowGroupBytes;
  final int pageBytes;
  final int pageRows;
  final int dictionaryBytes;
  final long targetFileBytes;

  private ParquetLayout(Map<String, String> table) {
    String codecName = table.getOrDefault("write.parquet.compression-codec", "zstd");
    this.codec = "none".equalsIgnoreCase(codecName) ? CompressionCodecName.UNCOMPRESSED
        : CompressionCodecName.valueOf(codecName.toUpperCase(Locale.ROOT));
    String level = table.get("write.parquet.compression-level");
    String levelKey = switch (codec) {
      case ZSTD -> "parquet.compression.codec.zstd.level";
      case GZIP -> "zlib.compress.level";
      case BROTLI -> "compression.brotli.quality";
      default -> null;
    };
    this.codecLevel = level == null || levelKey == null ? null : new String[] {levelKey, level};
    this.rowGroupBytes = positive(table, "write.parquet.row-group-size-bytes", 128L * 1024 * 1024);
    this.pageBytes = (int) positive(table, "write.parquet.page-size-bytes", 1024 * 1024);
    this.pageRows = (int) positive(table, "write.parquet.page-row-limit", 20_000);
    this.dictionaryBytes = (int) positive(table, "write.parquet.dict-size-bytes", 2 * 1024 * 1024);
    this.targetFileBytes = positive(table, "write.target-file-size-bytes", 512L * 1024 * 1024);
  }

  /** The layout of a table with these properties. */
  static ParquetLayout of(Map<String, String> tableProperties) {
    return new ParquetLayout(tableProperties);
  }

  private static long positive(Map<String, String> table, String key, long fallback) {
    String value = table.get(key);
    long parsed = value == null ? fallback : Long.parseLong(value.trim());
    if (parsed <= 0 || (!key.endsWith("row-group-size-bytes") && !key.startsWith("write.target")
        && parsed > Integer.MAX_VALUE)) {
      throw new IllegalArgumentException("table property " + key + " must be a positive size: " + value);
    }
    return parsed;
  }

  /** parquet-mr's encoding settings of this layout (the rest are parquet-mr's defaults). */
  ParquetProperties properties() {
    return ParquetProperties.builder()
        .withPageSize(pageBytes)
        .withPageRowCountLimit(pageRows)
        .withDictionaryPageSize(dictionaryBytes)
        .build();
  }
}
