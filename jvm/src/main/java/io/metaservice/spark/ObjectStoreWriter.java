package io.metaservice.spark;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.LocalOutputFile;
import org.apache.spark.JobExecutionStatus;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.SparkJobInfo;
import org.apache.spark.SparkStageInfo;
import org.apache.spark.SparkStatusTracker;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SQLExecution$;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

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
import software.amazon.awssdk.services.s3.model.DeleteObjectsResponse;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Response;
import software.amazon.awssdk.services.s3.model.ObjectIdentifier;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
import software.amazon.awssdk.services.s3.model.S3Object;

/**
 * A DataFrame's rows written as Parquet data files straight into an object store (S3), by
 * Spark's tasks in the JVM: the file Spark's own Parquet writer writes ({@link
 * ParquetRowWriter}: {@link ParquetWriteSupport}'s schema, field ids from the columns' {@code
 * parquet.field.id} metadata) into a local file of the task, laid out as the table's properties
 * say ({@link ParquetLayout}), then one
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
 * <p>A write leaves exactly the files it answers, or none. A task that fails deletes the objects
 * it uploaded. The write's jobs carry a tag of their own and run as one SQL execution, as
 * Spark's writers do; when they fail (or are cancelled: their tasks are interrupted), the write
 * waits until Spark's status shows none of their tasks running (at most a minute) and deletes
 * everything under its directory; when they succeed, it waits the same way and deletes every
 * object of its directory that no task answered (speculative attempts, attempts lost with their
 * executor). A task whose executor lacks the AWS SDK fails with {@link #SDK_MISSING}.
 */
public final class ObjectStoreWriter {
  private ObjectStoreWriter() {}

  /**
   * Writes {@code rows} (columns already those of the table, carrying field ids) under
   * {@code directory} ({@code s3://bucket/prefix/}) and answers one line per file written:
   * {@code uri \t bytes \t rows \t footer}, the footer being the file's last bytes from its
   * Parquet metadata on (the metadata, its length, {@code PAR1}) in Base64, so that the caller
   * describes the file without reading it back from the store. The files are laid out as the
   * table's properties say ({@link ParquetLayout}: codec, row groups, pages, dictionaries) and
   * roll over at about its {@code write.target-file-size-bytes}. The storage settings and the
   * table's properties come as lines of {@code key \t value}, and the answer is one string:
   * one call from Python, where each element of a Java collection would be a round trip.
   */
  public static String write(
      Dataset<Row> rows, String directory, String storageLines, String tablePropertyLines) {
    return String.join("\n", writeFiles(rows, directory, settings(storageLines),
        ParquetLayout.of(settings(tablePropertyLines))));
  }

  private static List<String> writeFiles(
      Dataset<Row> rows,
      String directory,
      HashMap<String, String> storage,
      ParquetLayout layout) {
    ObjectLocation target = writeDirectory(directory);
    StructType schema = rows.schema();
    Map<String, String> parquet = new HashMap<>();
    parquet.put("org.apache.spark.sql.parquet.row.attributes", schema.json());
    parquet.put(SQLConf.PARQUET_WRITE_LEGACY_FORMAT().key(), "false");
    parquet.put(SQLConf.PARQUET_OUTPUT_TIMESTAMP_TYPE().key(), "TIMESTAMP_MICROS");
    parquet.put(SQLConf.PARQUET_FIELD_ID_WRITE_ENABLED().key(), "true");
    parquet.put(
        SQLConf.PARQUET_ANNOTATE_VARIANT_LOGICAL_TYPE().key(),
        rows.sparkSession().conf().get(SQLConf.PARQUET_ANNOTATE_VARIANT_LOGICAL_TYPE().key()));
    if (layout.codecLevel != null) {
      parquet.put(layout.codecLevel[0], layout.codecLevel[1]);
    }
    SparkContext context = rows.sparkSession().sparkContext();
    // the write's own job tag (beside the caller's group and tags, which still cancel it): its
    // jobs are found again below; a cancelled job interrupts its other tasks, each of which
    // deletes what it uploaded
    String tag = "metaservice-write-" + UUID.randomUUID();
    String interrupt = context.getLocalProperty(INTERRUPT_ON_CANCEL);
    context.addJobTag(tag);
    context.setInterruptOnCancel(true);
    try {
      List<String> answered;
      try {
        // as Spark's own writers run: one SQL execution (the session's SQL settings reach the
        // tasks, the write shows in the SQL tab and to query listeners)
        QueryExecution execution = rows.queryExecution();
        answered = SQLExecution$.MODULE$.withNewExecutionId(execution, scala.Option.apply("metaservice write"),
            () -> execution.toRdd().toJavaRDD()
                .mapPartitions(partition ->
                    writeTask(partition, target, storage, parquet, layout).iterator())
                .collect());
      } catch (Throwable failed) {
        awaitTasks(context, tag);
        try {
          keepOnly(target, storage, Collections.emptyList());
        } catch (RuntimeException cleanup) {
          failed.addSuppressed(cleanup);
        }
        throw failed;
      }
      // attempts other than the answered ones may have uploaded files (speculation, an
      // attempt lost with its executor, a stage attempt left running): once no task of the
      // write runs any more, nothing but the answered files stays
      awaitTasks(context, tag);
      List<String> uris = new ArrayList<>();
      for (String line : answered) {
        uris.add(line.substring(0, line.indexOf('\t')));
      }
      try {
        keepOnly(target, storage, uris);
      } catch (RuntimeException cleanup) {
        // the answered files are whole and about to be committed: the write stands, and what
        // could not be deleted is logged (without the settings)
        LOG.warn("could not delete the stray objects of write {}: {}", directory, cleanup.toString());
      }
      return answered;
    } finally {
      context.removeJobTag(tag);
      context.setLocalProperty(INTERRUPT_ON_CANCEL, interrupt);
    }
  }

  private static final Logger LOG = LoggerFactory.getLogger(ObjectStoreWriter.class);
  private static final String INTERRUPT_ON_CANCEL = "spark.job.interruptOnCancel";
  private static final long SETTLE_MILLIS = 60_000;

  /**
   * Waits (at most a minute) until Spark's status shows the tagged jobs ended and none of
   * their stages' tasks running. The status trails the scheduler: a job not shown yet, or a
   * stage without status, counts as running.
   */
  private static void awaitTasks(SparkContext context, String tag) {
    SparkStatusTracker status = context.statusTracker();
    long deadline = System.currentTimeMillis() + SETTLE_MILLIS;
    while (System.currentTimeMillis() < deadline) {
      int[] jobs = status.getJobIdsForTag(tag);
      boolean running = jobs.length == 0;
      for (int job : jobs) {
        scala.Option<SparkJobInfo> info = status.getJobInfo(job);
        if (info.isEmpty() || info.get().status() == JobExecutionStatus.RUNNING) {
          running = true;
          break;
        }
        for (int stage : info.get().stageIds()) {
          scala.Option<SparkStageInfo> stageInfo = status.getStageInfo(stage);
          running |= stageInfo.isEmpty() || stageInfo.get().numActiveTasks() > 0;
        }
      }
      if (!running) {
        return;
      }
      try {
        Thread.sleep(5);
      } catch (InterruptedException interrupted) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  /**
   * Deletes the objects of a write that failed after its files were answered (the driver could
   * not describe or commit them): every object under {@code directory}, which must be a
   * write's own directory ({@code …/ms-<32 hex>/}).
   */
  public static int deleteWrite(String directory, String storageLines) {
    return keepOnly(writeDirectory(directory), settings(storageLines), Collections.emptyList());
  }

  /** The settings (serializable: the job's closure carries them to the tasks). */
  private static HashMap<String, String> settings(String storageLines) {
    return KeyValueLines.parse(storageLines);
  }

  /** A write's own directory, refused unless it is one: cleaning it deletes all it holds. */
  private static ObjectLocation writeDirectory(String directory) {
    ObjectLocation location = ObjectLocation.parse(directory.endsWith("/") ? directory : directory + "/");
    if (!location.key.matches("(.+/)?ms-[0-9a-f]{32}/")) {
      throw new IllegalArgumentException("not a write's directory (…/ms-<32 hex>/): " + directory);
    }
    return location;
  }

  /**
   * Deletes every object under {@code under} but those named in {@code keep} (their URIs as
   * {@link #write} answered them); answers how many were deleted. Listed and deleted in pages
   * of 1,000.
   *
   * @throws IllegalStateException the store refused to delete some of them
   */
  static int keepOnly(ObjectLocation under, Map<String, String> storage, List<String> keep) {
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
        deleted += delete(s3, under.bucket, doomed);
        token = Boolean.TRUE.equals(page.isTruncated()) ? page.nextContinuationToken() : null;
      } while (token != null);
    }
    return deleted;
  }

  /** Deletes {@code doomed} (at most 1,000); throws when the store refused any of them. */
  private static int delete(S3Client s3, String bucket, List<ObjectIdentifier> doomed) {
    if (doomed.isEmpty()) {
      return 0;
    }
    DeleteObjectsResponse answer = s3.deleteObjects(
        b -> b.bucket(bucket).delete(Delete.builder().objects(doomed).quiet(true).build()));
    if (answer.hasErrors() && !answer.errors().isEmpty()) {
      throw new IllegalStateException("the store refused to delete " + answer.errors().size()
          + " objects of a write, e.g. " + answer.errors().get(0).key() + ": "
          + answer.errors().get(0).code());
    }
    return doomed.size();
  }

  private static List<String> writeTask(
      Iterator<InternalRow> rows,
      ObjectLocation directory,
      Map<String, String> storage,
      Map<String, String> parquet,
      ParquetLayout layout)
      throws IOException {
    if (!rows.hasNext()) {
      return Collections.emptyList();
    }
    TaskContext task = TaskContext.get();
    // Iceberg's dates and timestamps are proleptic Gregorian whatever the session's rebase
    // modes say (Spark's writer reads them from the task's SQL settings): never rebased
    task.getLocalProperties().setProperty(SQLConf.PARQUET_REBASE_MODE_IN_WRITE().key(), "CORRECTED");
    task.getLocalProperties().setProperty(SQLConf.PARQUET_INT96_REBASE_MODE_IN_WRITE().key(), "CORRECTED");
    String stem = String.format("part-%05d-%d", task.partitionId(), task.taskAttemptId());
    Configuration conf = new Configuration(false);
    parquet.forEach(conf::set);
    List<String> written = new ArrayList<>();
    List<String> uploaded = new ArrayList<>();
    // staged in Spark's local directories, which Spark removes with the executor
    Path local = SparkEnv.get().blockManager().diskBlockManager().createTempLocalBlock()._2().toPath();
    boolean done = false;
    S3Client s3;
    try {
      s3 = client(storage);
    } catch (LinkageError missing) {
      Files.deleteIfExists(local);
      throw new IllegalStateException(SDK_MISSING + " (" + missing + ")", missing);
    }
    try {
      int file = 0;
      while (rows.hasNext()) {
        Files.deleteIfExists(local);
        long count = 0;
        try (ParquetRowWriter writer = new ParquetRowWriter(new LocalOutputFile(local), conf, layout)) {
          while (rows.hasNext()) {
            writer.write(rows.next());
            count++;
            if ((count & 1023) == 0 && writer.dataSize() >= layout.targetFileBytes) {
              break;
            }
          }
        }
        String key = String.format("%s%s-%03d%s.parquet", directory.key, stem, file++,
            layout.codec == CompressionCodecName.UNCOMPRESSED ? ""
                : "." + layout.codec.name().toLowerCase(java.util.Locale.ROOT));
        long bytes = Files.size(local);
        String footer = Base64.getEncoder().encodeToString(footer(local, bytes));
        uploaded.add(key);
        s3.putObject(PutObjectRequest.builder().bucket(directory.bucket).key(key).build(),
            RequestBody.fromFile(local));
        written.add(directory.scheme + "://" + directory.bucket + "/" + key + "\t" + bytes + "\t" + count
            + "\t" + footer);
      }
      done = true;
    } finally {
      try {
        if (!done && !uploaded.isEmpty()) {
          // a killed task's interrupt would abort the SDK's requests before they are sent
          boolean interrupted = Thread.interrupted();
          try {
            List<ObjectIdentifier> doomed = new ArrayList<>();
            for (String key : uploaded) {
              doomed.add(ObjectIdentifier.builder().key(key).build());
            }
            delete(s3, directory.bucket, doomed);
          } catch (RuntimeException cleanup) {
            // the task's own failure is the one to report; the driver's cleanup retries
          } finally {
            if (interrupted) {
              Thread.currentThread().interrupt();
            }
          }
        }
      } finally {
        s3.close();
        Files.deleteIfExists(local);
      }
    }
    return written;
  }

  /** The end of a Parquet file from its metadata on: the metadata, its length and the magic. */
  private static byte[] footer(Path file, long size) throws IOException {
    try (RandomAccessFile in = new RandomAccessFile(file.toFile(), "r")) {
      byte[] tail = new byte[8];
      in.seek(size - tail.length);
      in.readFully(tail);
      long length = ByteBuffer.wrap(tail, 0, 4).order(ByteOrder.LITTLE_ENDIAN).getInt() & 0xFFFFFFFFL;
      if (length + tail.length + 4 > size) {
        throw new IOException("not a Parquet file: a footer of " + length + " bytes in " + size);
      }
      byte[] footer = new byte[(int) length + tail.length];
      in.seek(size - footer.length);
      in.readFully(footer);
      return footer;
    }
  }

  /** The start of a task's error when the executors lack the AWS SDK (Python falls back). */
  public static final String SDK_MISSING = "metaservice: the AWS SDK is not on the executors' classpath";

  /** An S3 client for the vended settings (closed by its user). */
  static S3Client client(Map<String, String> storage) {
    String endpoint = storage.get("s3.endpoint");
    String region = storage.getOrDefault("s3.region", storage.getOrDefault("client.region", "us-east-1"));
    // path-style on a custom endpoint unless told otherwise (as pyiceberg's FileIO), virtual
    // hosts on AWS's own
    boolean pathStyle = Boolean.parseBoolean(storage.getOrDefault("s3.path-style-access",
        String.valueOf(endpoint != null && !endpoint.isEmpty()
            && !Boolean.parseBoolean(storage.getOrDefault("s3.force-virtual-addressing", "false")))));
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
}
