package io.metaservice.spark;

/**
 * The barrier logic of one streaming source, implemented by the plugin in the driver's Python
 * process ({@code spark_plugin/streaming/native_source.py}) and called through Py4J: which
 * barrier comes next, which files it appended, when it is read. Offsets are the JSON of the
 * plugin's {@code BarrierOffset}; {@code null} stands for the query's start.
 */
public interface BarrierPlanner {
  /** The offset a micro-batch should end at, or {@code null} for no new data at the start. */
  String latestOffset(String startJson, int maxFiles);

  /**
   * The rows between two offsets: Parquet files for Spark to scan (a {@code String}: the Spark
   * schema to read them with as JSON, then one file per line), or a batch {@code Dataset<Row>}
   * of them.
   */
  Object batch(String startJson, String endJson);

  /** The micro-batch ending at {@code endJson} is done (written, its offsets logged). */
  void commit(String endJson);

  /** {@code Trigger.AvailableNow}: read up to what is complete now, then stop. */
  void prepareForTriggerAvailableNow();

  /** {@code maxFilesPerTrigger} (admission control), 0 when not set. */
  int maxFilesPerTrigger();

  /** The query stopped. */
  void stop();
}
