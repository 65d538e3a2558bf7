package io.metaservice.spark;

import org.apache.spark.sql.execution.streaming.Offset;

/** An offset whose JSON the planner wrote (equal offsets have equal JSON). */
final class JsonOffset extends Offset {
  private final String json;

  JsonOffset(String json) {
    this.json = json;
  }

  @Override
  public String json() {
    return json;
  }
}
