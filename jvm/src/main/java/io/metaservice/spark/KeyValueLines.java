package io.metaservice.spark;

import java.util.HashMap;
import java.util.Map;

/**
 * Settings handed between Python and the JVM as one string, a line of {@code key \t value}
 * each: one Py4J call, where each element of a Java collection would be a round trip.
 */
final class KeyValueLines {
  private KeyValueLines() {}

  /** The settings of {@code lines} (a line without a tab, or with an empty key, is skipped). */
  static HashMap<String, String> parse(String lines) {
    HashMap<String, String> settings = new HashMap<>();
    for (String line : lines.split("\n")) {
      int tab = line.indexOf('\t');
      if (tab > 0) {
        settings.put(line.substring(0, tab), line.substring(tab + 1));
      }
    }
    return settings;
  }

  /** {@code settings} as lines, in the map's order. */
  static String format(Map<String, String> settings) {
    StringBuilder lines = new StringBuilder();
    settings.forEach((key, value) -> lines.append(key).append('\t').append(value).append('\n'));
    return lines.toString();
  }
}
