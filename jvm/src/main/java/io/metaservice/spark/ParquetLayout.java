package io.metaservice.spark;

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.hadoop.ParquetOutputFormat;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;

/**
 * How a table's data files are laid out, from its Iceberg properties and with Iceberg's
 * defaults (Iceberg's {@code TableProperties}, as its own Parquet writer reads them): codec and
 * level, row-group, page and dictionary sizes, rows per page, how often a row group's size is
 * checked, dictionaries, bloom filters, and the size at which a file rolls over. Serializable:
 * the write's closure carries it to the tasks.
 */
public final class ParquetLayout implements java.io.Serializable {
  private static final long serialVersionUID = 1L;

  final CompressionCodecName codec;
  /** The codec's level as parquet-mr's codecs read it (key, value), or null. */
  final String[] codecLevel;
  final long rowGroupBytes;
  final int pageBytes;
  final int pageRows;
  final int dictionaryBytes;
  final boolean dictionaries;
  final int sizeCheckMinRows;
  final int sizeCheckMaxRows;
  final int bloomFilterMaxBytes;
  /** Bloom filters by column path ({@code a.b}): enabled or not, and their false-positive rates. */
  final Map<String, Boolean> bloomFilters = new HashMap<>();
  final Map<String, Double> bloomFilterFpp = new HashMap<>();
  final long targetFileBytes;

  private ParquetLayout(Map<String, String> table) {
    this.codec = codec(table.getOrDefault("write.parquet.compression-codec", "zstd"));
    String level = table.get("write.parquet.compression-level");
    String levelKey = switch (codec) {
      case ZSTD -> "parquet.compression.codec.zstd.level";
      case GZIP -> "zlib.compress.level";
      case BROTLI -> "compression.brotli.quality";
      default -> null;
    };
    if (level != null && levelKey != null) {
      level = level(codec, level.trim());
    }
    this.codecLevel = level == null || levelKey == null ? null : new String[] {levelKey, level};
    this.rowGroupBytes = positive(table, "write.parquet.row-group-size-bytes", 128L * 1024 * 1024);
    this.pageBytes = (int) positive(table, "write.parquet.page-size-bytes", 1024 * 1024);
    this.pageRows = (int) positive(table, "write.parquet.page-row-limit", 20_000);
    this.dictionaryBytes = (int) positive(table, "write.parquet.dict-size-bytes", 2 * 1024 * 1024);
    this.dictionaries = Boolean.parseBoolean(table.getOrDefault("parquet.enable.dictionary", "true"));
    this.sizeCheckMinRows = (int) positive(table, "write.parquet.row-group-check-min-record-count", 100);
    this.sizeCheckMaxRows = (int) positive(table, "write.parquet.row-group-check-max-record-count", 10_000);
    if (sizeCheckMaxRows < sizeCheckMinRows) {
      throw new IllegalArgumentException("table property write.parquet.row-group-check-max-record-count"
          + " must be at least write.parquet.row-group-check-min-record-count");
    }
    this.bloomFilterMaxBytes = (int) positive(table, "write.parquet.bloom-filter-max-bytes", 1024 * 1024);
    table.forEach((key, value) -> {
      if (key.startsWith(BLOOM_ENABLED)) {
        bloomFilters.put(key.substring(BLOOM_ENABLED.length()), Boolean.parseBoolean(value));
      } else if (key.startsWith(BLOOM_FPP)) {
        bloomFilterFpp.put(key.substring(BLOOM_FPP.length()), rate(key, value));
      }
    });
    this.targetFileBytes = positive(table, "write.target-file-size-bytes", 512L * 1024 * 1024);
  }

  private static CompressionCodecName codec(String name) {
    if ("none".equalsIgnoreCase(name.trim())) {
      return CompressionCodecName.UNCOMPRESSED;
    }
    try {
      return CompressionCodecName.valueOf(name.trim().toUpperCase(Locale.ROOT));
    } catch (IllegalArgumentException unknown) {
      throw new IllegalArgumentException("table property write.parquet.compression-codec must be"
          + " a Parquet codec (zstd, snappy, gzip, lz4, brotli, uncompressed...): " + name);
    }
  }

  private static final String BLOOM_ENABLED = "write.parquet.bloom-filter-enabled.column.";
  private static final String BLOOM_FPP = "write.parquet.bloom-filter-fpp.column.";

  /**
   * The codec's level as its parquet-mr codec reads it, checked: zstd's and brotli's are whole
   * numbers in their ranges, gzip's a number of zlib's (0–9, -1, as pyiceberg writes them) or a
   * name of Hadoop's {@code ZlibCompressor.CompressionLevel}, which numbers become.
   */
  private static String level(CompressionCodecName codec, String level) {
    String key = "table property write.parquet.compression-level";
    if (codec == CompressionCodecName.GZIP) {
      String name = zlibLevel(level).toUpperCase(Locale.ROOT);
      if (!ZLIB_LEVELS.contains(name)) {
        throw new IllegalArgumentException(key + " must be a gzip level (0 to 9, or -1): " + level);
      }
      return name;
    }
    int lowest = codec == CompressionCodecName.ZSTD ? -131072 : 0;
    int highest = codec == CompressionCodecName.ZSTD ? 22 : 11;
    int parsed;
    try {
      parsed = Integer.parseInt(level);
    } catch (NumberFormatException notANumber) {
      parsed = Integer.MIN_VALUE;
    }
    if (parsed < lowest || parsed > highest) {
      throw new IllegalArgumentException(key + " must be a " + codec.name().toLowerCase(Locale.ROOT)
          + " level (" + lowest + " to " + highest + "): " + level);
    }
    return Integer.toString(parsed);
  }

  private static final java.util.Set<String> ZLIB_LEVELS = java.util.Set.of(
      "NO_COMPRESSION", "BEST_SPEED", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT",
      "BEST_COMPRESSION", "DEFAULT_COMPRESSION");

  private static String zlibLevel(String level) {
    return switch (level) {
      case "-1" -> "DEFAULT_COMPRESSION";
      case "0" -> "NO_COMPRESSION";
      case "1" -> "BEST_SPEED";
      case "2" -> "TWO";
      case "3" -> "THREE";
      case "4" -> "FOUR";
      case "5" -> "FIVE";
      case "6" -> "SIX";
      case "7" -> "SEVEN";
      case "8" -> "EIGHT";
      case "9" -> "BEST_COMPRESSION";
      default -> level;
    };
  }

  /** The layout of a table with these properties. */
  static ParquetLayout of(Map<String, String> tableProperties) {
    return new ParquetLayout(tableProperties);
  }

  /**
   * The layout of a table with these properties (lines of {@code key \t value}) as parquet-mr's
   * Hadoop settings, in the same lines: what a writer that takes its layout from a Hadoop
   * configuration needs (Spark's {@code df.write.parquet}, given them as options) to lay files
   * out as {@link #properties()} and the codec's level do. The codec itself is the writer's
   * option, and the target file size has no such setting.
   *
   * @throws IllegalArgumentException a property is not a valid value (the message names it)
   */
  public static String hadoopSettings(String tablePropertyLines) {
    return KeyValueLines.format(of(KeyValueLines.parse(tablePropertyLines)).hadoopSettings());
  }

  private Map<String, String> hadoopSettings() {
    Map<String, String> settings = new TreeMap<>();
    settings.put(ParquetOutputFormat.BLOCK_SIZE, Long.toString(rowGroupBytes));
    settings.put(ParquetOutputFormat.PAGE_SIZE, Integer.toString(pageBytes));
    settings.put(ParquetOutputFormat.PAGE_ROW_COUNT_LIMIT, Integer.toString(pageRows));
    settings.put(ParquetOutputFormat.DICTIONARY_PAGE_SIZE, Integer.toString(dictionaryBytes));
    settings.put(ParquetOutputFormat.ENABLE_DICTIONARY, Boolean.toString(dictionaries));
    settings.put(ParquetOutputFormat.MIN_ROW_COUNT_FOR_PAGE_SIZE_CHECK, Integer.toString(sizeCheckMinRows));
    settings.put(ParquetOutputFormat.MAX_ROW_COUNT_FOR_PAGE_SIZE_CHECK, Integer.toString(sizeCheckMaxRows));
    settings.put(ParquetOutputFormat.BLOOM_FILTER_MAX_BYTES, Integer.toString(bloomFilterMaxBytes));
    bloomFilters.forEach((column, enabled) ->
        settings.put(ParquetOutputFormat.BLOOM_FILTER_ENABLED + "#" + column, enabled.toString()));
    bloomFilterFpp.forEach((column, fpp) ->
        settings.put(ParquetOutputFormat.BLOOM_FILTER_FPP + "#" + column, fpp.toString()));
    if (codecLevel != null) {
      settings.put(codecLevel[0], codecLevel[1]);
    }
    return settings;
  }

  private static long positive(Map<String, String> table, String key, long fallback) {
    String value = table.get(key);
    long parsed;
    try {
      parsed = value == null ? fallback : Long.parseLong(value.trim());
    } catch (NumberFormatException notANumber) {
      parsed = -1;
    }
    if (parsed <= 0 || (!key.endsWith("row-group-size-bytes") && !key.startsWith("write.target")
        && parsed > Integer.MAX_VALUE)) {
      throw new IllegalArgumentException("table property " + key + " must be a positive size: " + value);
    }
    return parsed;
  }

  private static double rate(String key, String value) {
    double parsed;
    try {
      parsed = Double.parseDouble(value.trim());
    } catch (NumberFormatException notANumber) {
      parsed = Double.NaN;
    }
    if (!(parsed > 0 && parsed < 1)) {
      throw new IllegalArgumentException("table property " + key + " must be a rate between 0 and 1: " + value);
    }
    return parsed;
  }

  /** parquet-mr's encoding settings of this layout (the rest are parquet-mr's defaults). */
  ParquetProperties properties() {
    ParquetProperties.Builder builder = ParquetProperties.builder()
        .withPageSize(pageBytes)
        .withPageRowCountLimit(pageRows)
        .withDictionaryEncoding(dictionaries)
        .withDictionaryPageSize(dictionaryBytes)
        .withMinRowCountForPageSizeCheck(sizeCheckMinRows)
        .withMaxRowCountForPageSizeCheck(sizeCheckMaxRows)
        .withMaxBloomFilterBytes(bloomFilterMaxBytes);
    bloomFilters.forEach(builder::withBloomFilterEnabled);
    bloomFilterFpp.forEach(builder::withBloomFilterFPP);
    return builder.build();
  }
}
