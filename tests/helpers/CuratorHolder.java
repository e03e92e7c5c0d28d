// A real Apache Curator client taking a Hudi table's ZooKeeper lock, for the lock tests.
//
// It does what Hudi's ZookeeperBasedLockProvider does: create the lock path as persistent nodes
// when missing, then take an InterProcessMutex on it whose node data is "application_id=<id>"
// (HoodieInterProcessMutex). Usage:
//
//   java CuratorHolder HOSTS LOCK_PATH SESSION_TIMEOUT_MS WAIT_MS HOLD_MS
//
// Prints "held <node path>" once it holds the lock (or "timeout" when WAIT_MS passed first),
// holds until its stdin is closed or HOLD_MS passed, then releases and prints "released".
// A short SESSION_TIMEOUT_MS lets a test kill it with SIGKILL and see its node go soon after.

import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.BoundedExponentialBackoffRetry;

public class CuratorHolder {

    /** InterProcessMutex with node data, as HoodieInterProcessMutex writes it. */
    static final class AppIdMutex extends InterProcessMutex {
        private final byte[] data;

        AppIdMutex(CuratorFramework client, String path, String appId) {
            super(client, path);
            this.data = ("application_id=" + appId).getBytes(StandardCharsets.UTF_8);
        }

        @Override
        protected byte[] getLockNodeBytes() {
            return data;
        }
    }

    public static void main(String[] args) throws Exception {
        String hosts = args[0];
        String lockPath = args[1];
        int sessionMs = Integer.parseInt(args[2]);
        long waitMs = Long.parseLong(args[3]);
        long holdMs = Long.parseLong(args[4]);

        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .retryPolicy(new BoundedExponentialBackoffRetry(100, 1000, 5))
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.min(sessionMs, 15000))
                .build();
        client.start();
        if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
            System.out.println("no-connection");
            System.exit(3);
        }
        if (client.checkExists().forPath(lockPath) == null) {
            try {
                client.create().creatingParentsIfNeeded().forPath(lockPath);
            } catch (org.apache.zookeeper.KeeperException.NodeExistsException ignore) {
                // another writer created it meanwhile
            }
        }

        InterProcessMutex mutex = new AppIdMutex(client, lockPath, "curator-holder-" + ProcessHandle.current().pid());
        if (!mutex.acquire(waitMs, TimeUnit.MILLISECONDS)) {
            System.out.println("timeout");
            System.out.flush();
            client.close();
            System.exit(2);
        }
        String node = mutex.getParticipantNodes().iterator().next();
        System.out.println("held " + node);
        System.out.flush();

        CountDownLatch stdinClosed = new CountDownLatch(1);
        Thread reader = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // a line on stdin changes nothing: only its end releases
                }
            } catch (java.io.IOException ignore) {
                // treated as closed
            }
            stdinClosed.countDown();
        });
        reader.setDaemon(true);
        reader.start();
        stdinClosed.await(holdMs, TimeUnit.MILLISECONDS);

        mutex.release();
        System.out.println("released");
        System.out.flush();
        client.close();
    }
}
