"""The table of bench/cpu_clock.sh: reads lines "model kind round
predicted measured [load [median]]" (seconds; the 1-minute load average
as the measured run started; the measured run's median step beside its
fast step) and prints, per model and kind, the median
predicted and measured steps over the rounds, the median over the rounds of each
round's ratio (predicted / measured: the ratio of the medians where the
prediction is the same every round, and each measurement against the
prediction of the profile fitted just before it with FIT=round) and the
measured range; a ratio outside 0.9 to 1.1 is marked with '*'."""
import statistics
import sys


def table(lines):
    runs = {}
    order = []
    loads = []
    medians = {}
    for line in lines:
        f = line.split()
        if len(f) not in (5, 6, 7):
            continue
        key = (f[0], f[1])
        if key not in runs:
            runs[key] = ([], [])
            order.append(key)
        runs[key][0].append(float(f[3]))
        runs[key][1].append(float(f[4]))
        if len(f) >= 6:
            loads.append(float(f[5]))
        if len(f) == 7:
            medians.setdefault(key, []).append(float(f[6]))
    out = ["%-5s %-12s %6s %12s %12s %8s  %-15s %s" % ("model", "kind", "rounds", "predicted s", "measured s", "ratio", "measured range", "ratio to median steps")]
    for key in order:
        p, m = runs[key]
        pm, mm = statistics.median(p), statistics.median(m)
        ratio = statistics.median([a / b for a, b in zip(p, m)])
        mark = "" if 0.9 <= ratio <= 1.1 else " *"
        line = "%-5s %-12s %6d %12.4f %12.4f %8.3f%s  %.4f–%.4f" % (key[0], key[1], len(m), pm, mm, ratio, mark, min(m), max(m))
        if len(medians.get(key, [])) == len(p):
            line += "  %.3f" % statistics.median([a / b for a, b in zip(p, medians[key])])
        out.append(line)
    if loads:
        out.append("load average as the measured runs started: %.2f to %.2f (median %.2f)" % (min(loads), max(loads), statistics.median(loads)))
    return out


if __name__ == "__main__":
    print("\n".join(table(sys.stdin)))
