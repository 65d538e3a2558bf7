package io.metaservice.spark;

import java.util.Map;

/**
 * Makes {@link BarrierPlanner}s from a source's options; implemented by the plugin in the
 * driver's Python process and registered by {@code spark_plugin.register_data_source}.
 */
public interface BarrierPlannerFactory {
  /** Validates the options, registers the source's edge, answers the Spark schema as JSON. */
  String schemaJson(Map<String, String> options);

  /** The planner of one source of a running query. */
  BarrierPlanner create(Map<String, String> options);
}
