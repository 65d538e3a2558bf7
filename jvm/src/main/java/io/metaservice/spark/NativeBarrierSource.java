package io.metaservice.spark;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.datasources.DataSource;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation$;
import org.apache.spark.sql.execution.streaming.Offset;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One source of a streaming query (a Structured Streaming V1 {@link Source} with admission
 * control, as Spark's own file stream source). Each micro-batch is what the planner answers
 * for its offsets: for files Spark can read as they are, their list, which this class scans as
 * Spark's file stream source does (a streaming relation of Spark's Parquet format: column
 * pruning, filter pushdown, vectorized reads); else a batch DataFrame (files read in the
 * plugin's Python tasks), whose rows this class hands to the query.
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
  @SuppressWarnings("unchecked")
  public Dataset<Row> getBatch(Option<Offset> start, Offset end) {
    Object batch = planner.batch(start.isDefined() ? start.get().json() : null, end.json());
    if (batch instanceof String) {
      return fileScan((String) batch);
    }
    return asStreaming((org.apache.spark.sql.classic.Dataset<Row>) batch);
  }

  /**
   * Spark's own scan of Parquet files, as its file stream source builds one: the files are
   * known, so none is listed or checked. {@code files}: the schema to read (Spark's JSON, with
   * Parquet field ids where columns are matched by id), then one file per line.
   */
  private Dataset<Row> fileScan(String files) {
    List<String> lines = Arrays.asList(files.split("\n", -1));
    StructType readSchema = (StructType) DataType.fromJson(lines.get(0));
    DataSource source =
        new DataSource(
            session,
            "parquet",
            CollectionConverters.asScala(lines.subList(1, lines.size())).toList(),
            Option.apply(readSchema),
            CollectionConverters.asScala(List.<String>of()).toList(),
            Option.empty(),
            // the files are named one by one: no partition values from their directories
            scala.collection.immutable.Map$.MODULE$.from(
                CollectionConverters.asScala(Map.of("recursiveFileLookup", "true"))),
            Option.empty(),
            Option.empty());
    BaseRelation relation =
        source.resolveRelation(
            false, source.resolveRelation$default$2(), source.resolveRelation$default$3());
    return org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(
        session, LogicalRelation$.MODULE$.apply(relation, true));
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
