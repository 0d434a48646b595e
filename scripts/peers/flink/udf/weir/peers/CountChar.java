// count_char(s, c) for Flink, as Nexmark's q14 calls it: how many times the first character
// of c occurs in s (0 when s is null). weir's own count_char is the reference it is checked
// against; scripts/bench-peers.sh compiles this file for scripts/peers/flink/q14.sql.
package weir.peers;

import org.apache.flink.table.functions.ScalarFunction;

public class CountChar extends ScalarFunction {
    public long eval(String s, String c) {
        if (s == null || c == null || c.isEmpty()) {
            return 0;
        }
        char wanted = c.charAt(0);
        long n = 0;
        for (int i = 0; i < s.length(); i++) {
            if (s.charAt(i) == wanted) {
                n++;
            }
        }
        return n;
    }
}
