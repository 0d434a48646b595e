// scripts/kafka-broker.sh's Java side, compiled once into the cache next to Kafka's JARs:
//
//   WeirKafka broker CONFIG CLUSTER_ID       format CONFIG's log directory if it is not yet,
//                                            then run the broker in the same JVM
//   WeirKafka topic HOST:PORT NAME PARTITIONS   create a topic (replication 1) and wait until
//                                            every partition has a leader
//   WeirKafka produce HOST:PORT NAME PARTITIONS FILE   write each line of FILE as a record's
//                                            value, line i to partition i % PARTITIONS
//
// Formatting in the broker's JVM saves the second JVM start that `kafka-storage.sh format`
// costs (1.5 s); the topic command is the AdminClient alone, without kafka-tools'
// dependencies (Kafka Connect, Jetty, Jersey).

import java.io.BufferedReader;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartitionInfo;

public final class WeirKafka {
    public static void main(String[] args) throws Exception {
        String usage = "usage: WeirKafka broker CONFIG CLUSTER_ID | topic HOST:PORT NAME PARTITIONS"
            + " | produce HOST:PORT NAME PARTITIONS FILE";
        if (args.length == 3 && args[0].equals("broker")) {
            broker(args[1], args[2]);
        } else if (args.length == 4 && args[0].equals("topic")) {
            System.exit(topic(args[1], args[2], Integer.parseInt(args[3])));
        } else if (args.length == 5 && args[0].equals("produce")) {
            System.exit(produce(args[1], args[2], Integer.parseInt(args[3]), Path.of(args[4])));
        } else {
            System.err.println(usage);
            System.exit(2);
        }
    }

    static void broker(String config, String clusterId) throws Exception {
        Properties props = new Properties();
        try (var in = new java.io.FileInputStream(config)) {
            props.load(in);
        }
        File meta = new File(props.getProperty("log.dirs"), "meta.properties");
        if (!meta.exists()) {
            int code = kafka.tools.StorageTool.execute(
                new String[] {"format", "--cluster-id", clusterId, "--config", config,
                    "--ignore-formatted"},
                System.out);
            if (code != 0) {
                System.err.println("formatting the log directory failed: " + code);
                System.exit(code);
            }
        }
        kafka.Kafka.main(new String[] {config});
    }

    static int topic(String servers, String name, int partitions) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, servers);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        try (Admin admin = Admin.create(props)) {
            try {
                admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get();
            } catch (ExecutionException e) {
                System.err.println("creating topic " + name + " on " + servers + ": "
                    + e.getCause().getMessage());
                return 1;
            }
            // The controller has the topic; wait until the broker's metadata gives every
            // partition a leader, so that clients started next find it whole.
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (true) {
                try {
                    Map<String, TopicDescription> d =
                        admin.describeTopics(List.of(name)).allTopicNames().get();
                    List<TopicPartitionInfo> ps = d.get(name).partitions();
                    if (ps.size() == partitions && ps.stream().allMatch(p -> p.leader() != null)) {
                        return 0;
                    }
                } catch (ExecutionException e) {
                    // Not in the broker's metadata yet.
                }
                if (System.nanoTime() > deadline) {
                    System.err.println("topic " + name + " has no leader for every partition "
                        + "after 30 s");
                    return 1;
                }
                Thread.sleep(20);
            }
        }
    }

    static int produce(String servers, String name, int partitions, Path file) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, servers);
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "1048576");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG,
            "org.apache.kafka.common.serialization.StringSerializer");
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG,
            "org.apache.kafka.common.serialization.StringSerializer");
        long i = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props);
             BufferedReader lines = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            while ((line = lines.readLine()) != null) {
                producer.send(new ProducerRecord<>(name, (int) (i % partitions), null, line));
                i++;
            }
            // Closing flushes: every record is acknowledged (or the close throws).
        }
        System.err.println("produced " + i + " records to " + name);
        return 0;
    }
}
