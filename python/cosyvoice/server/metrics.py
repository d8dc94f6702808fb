"""Counters, gauges and histograms written in the Prometheus text exposition format (version
0.0.4), without a client library: the server has a handful of series, all updated on the event
loop's thread (the reader threads never touch them), so no locking is needed."""
import math

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _labels(names, values):
    if not names:
        return ""
    esc = (str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, esc)) + "}"


def _num(x):
    if isinstance(x, float):
        if math.isinf(x):
            return "+Inf" if x > 0 else "-Inf"
        return repr(x)
    return str(x)


class Counter:
    """A counter (optionally with labels): inc(), get(), render()."""

    def __init__(self, name, help_, labels=()):
        self.name, self.help, self.labels = name, help_, tuple(labels)
        self.values = {} if self.labels else {(): 0}

    def inc(self, *label_values, by=1):
        if len(label_values) != len(self.labels):
            raise ValueError(f"{self.name}: labels {self.labels}, got {label_values}")
        self.values[label_values] = self.values.get(label_values, 0) + by

    def get(self, *label_values):
        return self.values.get(label_values, 0)

    def render(self, typ="counter"):
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {typ}"]
        for lv, v in sorted(self.values.items()):
            out.append(f"{self.name}{_labels(self.labels, lv)} {_num(v)}")
        return out


class Gauge(Counter):
    """A gauge: a Counter that can also be set()."""

    def set(self, *label_values, value):
        self.values[label_values] = value

    def render(self, typ="gauge"):
        return super().render(typ)


class Histogram:
    """A histogram with fixed bucket bounds: observe(), render()."""

    def __init__(self, name, help_, buckets):
        self.name, self.help = name, help_
        self.buckets = sorted(buckets)
        self.counts = [0] * len(self.buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, x):
        self.count += 1
        self.sum += x
        for i, b in enumerate(self.buckets):
            if x <= b:
                self.counts[i] += 1

    def render(self):
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for b, c in zip(self.buckets, self.counts):
            out.append(f'{self.name}_bucket{{le="{_num(float(b))}"}} {c}')
        out.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{self.name}_sum {_num(float(self.sum))}")
        out.append(f"{self.name}_count {self.count}")
        return out


def render(metrics):
    """The text exposition of a list of metrics."""
    lines = []
    for m in metrics:
        lines.extend(m.render())
    return "\n".join(lines) + "\n"
