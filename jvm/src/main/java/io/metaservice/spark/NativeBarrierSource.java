package io.metaservice.spark;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.streaming.Offset;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.types.StructType;
import scala.Option;

/**
 * One source of a streaming query (a Structured Streaming V1 {@link Source} with admission
 * control, as Spark's own file stream source). Each micro-batch is the DataFrame the planner
 * builds for its offsets: for files Spark can read, a plain {@code spark.read.parquet} of the
 * barrier's files, which this class marks as streaming so that the query plans it with Spark's
 * file scan (column pruning, filter pushdown, vectorized Parquet reads).
 */
final class NativeBarrierSource implements Source, SupportsTriggerAvailableNow {
  private final SparkSession session;
  private final StructType schema;
  private final BarrierPlanner planner;

  NativeBarrierSource(SQLContext sqlContext, StructType schema, BarrierPlanner planner) {
    this.session = (SparkSession) sqlContext.sparkSession();
    this.schema = schema;
    this.planner = planner;
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Option<Offset> getOffset() {
    // Spark asks latestOffset of a source with admission control, never this.
    throw new UnsupportedOperationException("latestOffset(start, limit) is used instead");
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    int maxFiles = planner.maxFilesPerTrigger();
    return maxFiles > 0 ? ReadLimit.maxFiles(maxFiles) : ReadLimit.allAvailable();
  }

  @Override
  public org.apache.spark.sql.connector.read.streaming.Offset latestOffset(
      org.apache.spark.sql.connector.read.streaming.Offset start, ReadLimit limit) {
    int maxFiles = limit instanceof ReadMaxFiles ? ((ReadMaxFiles) limit).maxFiles() : 0;
    String end = planner.latestOffset(start == null ? null : start.json(), maxFiles);
    return end == null ? null : new JsonOffset(end);
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    planner.prepareForTriggerAvailableNow();
  }

  @Override
  public Dataset<Row> getBatch(Option<Offset> start, Offset end) {
    Dataset<Row> batch =
        planner.batch(start.isDefined() ? start.get().json() : null, end.json());
    return asStreaming((org.apache.spark.sql.classic.Dataset<Row>) batch);
  }

  /** The same rows as a streaming DataFrame, as the micro-batch engine requires. */
  private Dataset<Row> asStreaming(org.apache.spark.sql.classic.Dataset<Row> batch) {
    LogicalPlan plan = batch.queryExecution().analyzed();
    if (plan instanceof LogicalRelation) {
      LogicalRelation relation = (LogicalRelation) plan;
      LogicalRelation streaming =
          relation.copy(
              relation.relation(),
              relation.output(),
              relation.catalogTable(),
              true,
              Option.empty());
      return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(session, streaming);
    }
    // any other plan (files read in the plugin's Python tasks, no files): its rows
    return session.internalCreateDataFrame(batch.queryExecution().toRdd(), batch.schema(), true);
  }

  @Override
  public void commit(Offset end) {
    planner.commit(end.json());
  }

  @Override
  public void commit(org.apache.spark.sql.connector.read.streaming.Offset end) {
    planner.commit(end.json());
  }

  @Override
  public void stop() {
    planner.stop();
  }

  @Override
  public String toString() {
    return NativeBarrierSourceProvider.SHORT_NAME + "[" + schema.simpleString() + "]";
  }
}
