package io.metaservice.spark;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.LocalOutputFile;
import org.apache.parquet.io.OutputFile;
import org.apache.spark.JobExecutionStatus;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkJobInfo;
import org.apache.spark.SparkStageInfo;
import org.apache.spark.SparkStatusTracker;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;

import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentials;
import software.amazon.awssdk.auth.credentials.AwsSessionCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.checksums.RequestChecksumCalculation;
import software.amazon.awssdk.core.checksums.ResponseChecksumValidation;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.http.apache5.Apache5HttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.Delete;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Response;
import software.amazon.awssdk.services.s3.model.ObjectIdentifier;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Object;

/**
 * A DataFrame's rows written as Parquet data files straight into an object store (S3), by
 * Spark's tasks in the JVM: Spark's own Parquet writer ({@link ParquetWriteSupport}, field ids
 * from the columns' {@code parquet.field.id} metadata) into a local file of the task, then one
 * PUT of that file to the store with the credentials the catalog vended for the table. No
 * Hadoop filesystem and no output committer: the files of one write are named under one fresh
 * directory of the table's data location, and what the tasks answer is exactly what the caller
 * commits.
 *
 * <p>Credentials are plain settings (pyiceberg's names: {@code s3.endpoint}, {@code s3.region},
 * {@code s3.access-key-id}, {@code s3.secret-access-key}, {@code s3.session-token},
 * {@code s3.path-style-access} / {@code s3.force-virtual-addressing}); they travel to the tasks
 * inside the job's closure, as every other setting of the write. Each task builds its own S3
 * client and closes it when it ends, so no client outlives the write (an executor JVM that runs
 * many writes keeps no thread of theirs).
 *
 * <p>A write leaves exactly the files it answers, or none: a task that fails deletes the objects
 * it uploaded; a write whose job fails deletes everything under its directory once the job's
 * tasks have ended; a write whose job may have left other attempts' objects (speculation, a
 * failed attempt, an executor lost) deletes every object of its directory it does not answer.
 */
public final class ObjectStoreWriter {
  private ObjectStoreWriter() {}

  /**
   * Writes {@code rows} (columns already those of the table, carrying field ids) under
   * {@code directory} ({@code s3://bucket/prefix/}) and answers one line per file written:
   * {@code uri \t bytes \t rows}. Files roll over at about {@code targetFileBytes}. The
   * storage settings come as lines of {@code key \t value}, and the answer is one string: one
   * call from Python, where each element of a Java collection would be a round trip.
   */
  public static String write(
      Dataset<Row> rows, String directory, String storageLines, String codec, long targetFileBytes) {
    Map<String, String> storage = new HashMap<>();
    for (String line : storageLines.split("\n")) {
      int tab = line.indexOf('\t');
      if (tab > 0) {
        storage.put(line.substring(0, tab), line.substring(tab + 1));
      }
    }
    return String.join("\n", writeFiles(rows, directory, storage, codec, targetFileBytes));
  }

  private static List<String> writeFiles(
      Dataset<Row> rows,
      String directory,
      Map<String, String> storage,
      String codec,
      long targetFileBytes) {
    StructType schema = rows.schema();
    Map<String, String> parquet = new HashMap<>();
    parquet.put("org.apache.spark.sql.parquet.row.attributes", schema.json());
    parquet.put(SQLConf.PARQUET_WRITE_LEGACY_FORMAT().key(), "false");
    parquet.put(SQLConf.PARQUET_OUTPUT_TIMESTAMP_TYPE().key(), "TIMESTAMP_MICROS");
    parquet.put(SQLConf.PARQUET_FIELD_ID_WRITE_ENABLED().key(), "true");
    parquet.put(
        SQLConf.PARQUET_ANNOTATE_VARIANT_LOGICAL_TYPE().key(),
        rows.sparkSession().conf().get(SQLConf.PARQUET_ANNOTATE_VARIANT_LOGICAL_TYPE().key()));
    Map<String, String> settings = new HashMap<>(storage);
    CompressionCodecName compression = CompressionCodecName.fromConf(codec);
    ObjectLocation target = ObjectLocation.parse(directory.endsWith("/") ? directory : directory + "/");
    JavaRDD<InternalRow> internal = rows.queryExecution().toRdd().toJavaRDD();
    SparkContext context = rows.sparkSession().sparkContext();
    String group = "metaservice-write-" + UUID.randomUUID();
    Map<String, String> before = new HashMap<>();
    for (String key : JOB_GROUP_PROPERTIES) {
      before.put(key, context.getLocalProperty(key));
    }
    // the write's own job group: its job is found again below, and a failed job interrupts
    // its other tasks (each deletes what it uploaded)
    context.setJobGroup(group, "metaservice write to " + directory, true);
    try {
      List<String> answered;
      try {
        answered = internal
            .mapPartitions(partition ->
                writeTask(partition, target, settings, parquet, compression, targetFileBytes).iterator())
            .collect();
      } catch (RuntimeException failed) {
        awaitTasks(context, group);
        try {
          keepOnly(directory, storage, Collections.emptyList());
        } catch (RuntimeException cleanup) {
          failed.addSuppressed(cleanup);
        }
        throw failed;
      }
      if (mayHaveLeftObjects(context, group)) {
        awaitTasks(context, group);
        List<String> uris = new ArrayList<>();
        for (String line : answered) {
          uris.add(line.substring(0, line.indexOf('\t')));
        }
        keepOnly(directory, storage, uris);
      }
      return answered;
    } finally {
      before.forEach(context::setLocalProperty);
    }
  }

  private static final List<String> JOB_GROUP_PROPERTIES = List.of(
      "spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel");

  /**
   * Whether attempts other than the answered ones may have uploaded files: speculation is on,
   * a task attempt failed (a task that fails deletes its uploads, an executor lost midway does
   * not), or Spark's status of the job is not known.
   */
  private static boolean mayHaveLeftObjects(SparkContext context, String group) {
    if (context.conf().getBoolean("spark.speculation", false)) {
      return true;
    }
    SparkStatusTracker status = context.statusTracker();
    int[] jobs = status.getJobIdsForGroup(group);
    if (jobs.length == 0 || !jobsEnded(status, jobs, SETTLE_MILLIS)) {
      return true;
    }
    for (int job : jobs) {
      for (int stage : status.getJobInfo(job).get().stageIds()) {
        scala.Option<SparkStageInfo> info = status.getStageInfo(stage);
        if (info.isEmpty() || info.get().numFailedTasks() > 0 || info.get().numActiveTasks() > 0) {
          return true;
        }
      }
    }
    return false;
  }

  private static final long SETTLE_MILLIS = 10_000;

  /** Waits (a bounded time) until no task of the group's jobs runs any more. */
  private static void awaitTasks(SparkContext context, String group) {
    SparkStatusTracker status = context.statusTracker();
    long deadline = System.currentTimeMillis() + 6 * SETTLE_MILLIS;
    int[] jobs = status.getJobIdsForGroup(group);
    if (!jobsEnded(status, jobs, 6 * SETTLE_MILLIS)) {
      return;
    }
    while (System.currentTimeMillis() < deadline) {
      boolean running = false;
      for (int job : jobs) {
        for (int stage : status.getJobInfo(job).get().stageIds()) {
          scala.Option<SparkStageInfo> info = status.getStageInfo(stage);
          running |= info.isDefined() && info.get().numActiveTasks() > 0;
        }
      }
      if (!running || !pause()) {
        return;
      }
    }
  }

  /** Whether Spark's status shows every job ended (it trails the scheduler a little). */
  private static boolean jobsEnded(SparkStatusTracker status, int[] jobs, long withinMillis) {
    long deadline = System.currentTimeMillis() + withinMillis;
    while (true) {
      boolean ended = true;
      for (int job : jobs) {
        scala.Option<SparkJobInfo> info = status.getJobInfo(job);
        ended &= info.isDefined() && info.get().status() != JobExecutionStatus.RUNNING;
      }
      if (ended) {
        return true;
      }
      if (System.currentTimeMillis() >= deadline || !pause()) {
        return false;
      }
    }
  }

  private static boolean pause() {
    try {
      Thread.sleep(5);
      return true;
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  /**
   * Deletes every object under {@code directory} but those named in {@code keep} (their URIs
   * as {@link #write} answered them); answers how many were deleted. Listed and deleted in
   * pages of 1,000.
   */
  static int keepOnly(String directory, Map<String, String> storage, List<String> keep) {
    ObjectLocation under = ObjectLocation.parse(directory.endsWith("/") ? directory : directory + "/");
    Set<String> kept = new HashSet<>();
    for (String uri : keep) {
      kept.add(ObjectLocation.parse(uri).key);
    }
    int deleted = 0;
    try (S3Client s3 = client(storage)) {
      String token = null;
      do {
        ListObjectsV2Response page = s3.listObjectsV2(
            ListObjectsV2Request.builder().bucket(under.bucket).prefix(under.key)
                .continuationToken(token).build());
        List<ObjectIdentifier> doomed = new ArrayList<>();
        for (S3Object object : page.contents()) {
          if (!kept.contains(object.key())) {
            doomed.add(ObjectIdentifier.builder().key(object.key()).build());
          }
        }
        if (!doomed.isEmpty()) {
          s3.deleteObjects(b -> b.bucket(under.bucket).delete(Delete.builder().objects(doomed).build()));
          deleted += doomed.size();
        }
        token = Boolean.TRUE.equals(page.isTruncated()) ? page.nextContinuationToken() : null;
      } while (token != null);
    }
    return deleted;
  }

  private static List<String> writeTask(
      Iterator<InternalRow> rows,
      ObjectLocation directory,
      Map<String, String> storage,
      Map<String, String> parquet,
      CompressionCodecName compression,
      long targetFileBytes)
      throws IOException {
    if (!rows.hasNext()) {
      return Collections.emptyList();
    }
    TaskContext task = TaskContext.get();
    String stem = String.format("part-%05d-%d", task.partitionId(), task.taskAttemptId());
    Configuration conf = new Configuration(false);
    parquet.forEach(conf::set);
    List<String> written = new ArrayList<>();
    List<String> uploaded = new ArrayList<>();
    Path local = Files.createTempFile("metaservice-write-", ".parquet");
    boolean done = false;
    try (S3Client s3 = client(storage)) {
      try {
        int file = 0;
        while (rows.hasNext()) {
          Files.deleteIfExists(local);
          long count = 0;
          try (ParquetWriter<InternalRow> writer = new RowWriterBuilder(new LocalOutputFile(local))
              .withConf(conf)
              .withCompressionCodec(compression)
              .withWriteMode(ParquetFileWriter.Mode.CREATE)
              .build()) {
            while (rows.hasNext()) {
              writer.write(rows.next());
              count++;
              if ((count & 1023) == 0 && writer.getDataSize() >= targetFileBytes) {
                break;
              }
            }
          }
          String key = String.format("%s%s-%03d%s.parquet", directory.key, stem, file++,
              compression == CompressionCodecName.UNCOMPRESSED ? ""
                  : "." + compression.name().toLowerCase(java.util.Locale.ROOT));
          long bytes = Files.size(local);
          uploaded.add(key);
          s3.putObject(PutObjectRequest.builder().bucket(directory.bucket).key(key).build(),
              RequestBody.fromFile(local));
          written.add(directory.scheme + "://" + directory.bucket + "/" + key + "\t" + bytes + "\t" + count);
        }
        done = true;
      } finally {
        if (!done && !uploaded.isEmpty()) {
          List<ObjectIdentifier> doomed = new ArrayList<>();
          for (String key : uploaded) {
            doomed.add(ObjectIdentifier.builder().key(key).build());
          }
          try {
            s3.deleteObjects(b -> b.bucket(directory.bucket).delete(Delete.builder().objects(doomed).build()));
          } catch (RuntimeException cleanup) {
            // the task's own failure is the one to report; the caller's keepOnly removes them
          }
        }
      }
    } finally {
      Files.deleteIfExists(local);
    }
    return written;
  }

  /** An S3 client for the vended settings (closed by its user). */
  static S3Client client(Map<String, String> storage) {
    String endpoint = storage.get("s3.endpoint");
    String region = storage.getOrDefault("s3.region", storage.getOrDefault("client.region", "us-east-1"));
    boolean pathStyle = Boolean.parseBoolean(storage.getOrDefault("s3.path-style-access",
        String.valueOf(!Boolean.parseBoolean(storage.getOrDefault("s3.force-virtual-addressing", "false")))));
    String access = storage.get("s3.access-key-id");
    String secret = storage.get("s3.secret-access-key");
    String token = storage.get("s3.session-token");
    if (access == null || secret == null) {
      throw new IllegalArgumentException("no vended credentials for the object store (s3.access-key-id)");
    }
    AwsCredentials credentials = token == null || token.isEmpty()
        ? AwsBasicCredentials.create(access, secret)
        : AwsSessionCredentials.create(access, secret, token);
    var builder = S3Client.builder()
        .region(Region.of(region))
        .forcePathStyle(pathStyle)
        .credentialsProvider(StaticCredentialsProvider.create(credentials))
        .requestChecksumCalculation(RequestChecksumCalculation.WHEN_REQUIRED)
        .responseChecksumValidation(ResponseChecksumValidation.WHEN_REQUIRED)
        .httpClientBuilder(Apache5HttpClient.builder());
    if (endpoint != null && !endpoint.isEmpty()) {
      builder.endpointOverride(URI.create(endpoint));
    }
    return builder.build();
  }

  /** {@code scheme://bucket/key}. */
  static final class ObjectLocation implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final String scheme;
    final String bucket;
    final String key;

    private ObjectLocation(String scheme, String bucket, String key) {
      this.scheme = scheme;
      this.bucket = bucket;
      this.key = key;
    }

    static ObjectLocation parse(String uri) {
      int colon = uri.indexOf("://");
      if (colon < 0) {
        throw new IllegalArgumentException("not an object store URI: " + uri);
      }
      String rest = uri.substring(colon + 3);
      int slash = rest.indexOf('/');
      if (slash <= 0) {
        throw new IllegalArgumentException("no bucket in " + uri);
      }
      return new ObjectLocation(uri.substring(0, colon), rest.substring(0, slash), rest.substring(slash + 1));
    }
  }

  /** Spark's Parquet write support behind parquet-mr's writer builder. */
  private static final class RowWriterBuilder extends ParquetWriter.Builder<InternalRow, RowWriterBuilder> {
    RowWriterBuilder(OutputFile file) {
      super(file);
    }

    @Override
    protected RowWriterBuilder self() {
      return this;
    }

    @Override
    protected WriteSupport<InternalRow> getWriteSupport(Configuration conf) {
      return new ParquetWriteSupport();
    }
  }
}
