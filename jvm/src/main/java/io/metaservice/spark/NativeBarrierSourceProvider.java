package io.metaservice.spark;

import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.StreamSourceProvider;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code spark.readStream.format("metaservice_native")}: the plugin's streaming source with
 * each barrier's files read by Spark's own Parquet reader. The barrier logic lives in the
 * plugin's Python ({@link BarrierPlannerFactory}, registered per driver by
 * {@code spark_plugin.register_data_source}); this class only hands Spark its answers.
 */
public final class NativeBarrierSourceProvider implements StreamSourceProvider, DataSourceRegister {
  public static final String SHORT_NAME = "metaservice_native";

  private static final AtomicReference<BarrierPlannerFactory> FACTORY = new AtomicReference<>();

  /** Called by {@code spark_plugin.register_data_source} (through Py4J). */
  public static void register(BarrierPlannerFactory factory) {
    FACTORY.set(factory);
  }

  /** Whether a factory is registered in this JVM. */
  public static boolean registered() {
    return FACTORY.get() != null;
  }

  static BarrierPlannerFactory factory() {
    BarrierPlannerFactory factory = FACTORY.get();
    if (factory == null) {
      throw new IllegalStateException(
          "format '" + SHORT_NAME + "' has no planner in this driver: call "
              + "spark_plugin.register_data_source(spark) before spark.readStream");
    }
    return factory;
  }

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public Tuple2<String, StructType> sourceSchema(
      SQLContext sqlContext,
      Option<StructType> schema,
      String providerName,
      scala.collection.immutable.Map<String, String> parameters) {
    if (schema.isDefined()) {
      throw new IllegalArgumentException(
          "format '" + SHORT_NAME + "' takes its schema from the table: drop .schema(...)");
    }
    String json = factory().schemaJson(javaMap(parameters));
    return new Tuple2<>(SHORT_NAME, (StructType) DataType.fromJson(json));
  }

  @Override
  public Source createSource(
      SQLContext sqlContext,
      String metadataPath,
      Option<StructType> schema,
      String providerName,
      scala.collection.immutable.Map<String, String> parameters) {
    Map<String, String> options = javaMap(parameters);
    StructType structType =
        schema.isDefined() ? schema.get() : (StructType) DataType.fromJson(
            factory().schemaJson(options));
    return new NativeBarrierSource(sqlContext, structType, factory().create(options));
  }

  private static Map<String, String> javaMap(scala.collection.immutable.Map<String, String> m) {
    return new java.util.HashMap<>(CollectionConverters.asJava(m));
  }
}
