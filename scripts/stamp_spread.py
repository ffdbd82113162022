"""What the stamp summaries share (scripts/normal_stamps.py, scripts/symmetric_stamps.py): each point's spread
over the ranks (or blocks) of a sampled call, relative to the call's first stamp, as medians over the calls;
and the order in which the ranks' first kernels started (session 36: released together on one GPU they
started ~5 us a rank apart)."""
import statistics


class Spread:
    """Per point, the medians over calls of the earliest, median and latest stamp after each call's origin."""

    def __init__(self, points):
        self.points = list(points)
        self.first = {point: [] for point in self.points}
        self.middle = {point: [] for point in self.points}
        self.last = {point: [] for point in self.points}

    def add_call(self, stamp_lists, origin):
        """stamp_lists: one list of ns stamps per rank (or block), in self.points' order, 0 where not reached."""
        for index, point in enumerate(self.points):
            values = sorted((stamps[index] - origin) / 1e3 for stamps in stamp_lists if stamps[index] != 0)
            if not values:
                continue
            self.first[point].append(values[0])
            self.middle[point].append(values[len(values) // 2])
            self.last[point].append(values[-1])

    def print_table(self, heading, width):
        print(f"{heading:<{width}} {'first us':>9} {'median us':>10} {'last us':>9}")
        for point in self.points:
            if not self.first[point]:
                print(f"{point:<{width}} {'-':>9} {'-':>10} {'-':>9}")
                continue
            print(f"{point:<{width}} {statistics.median(self.first[point]):9.1f} "
                  f"{statistics.median(self.middle[point]):10.1f} {statistics.median(self.last[point]):9.1f}")


def start_order(first_starts_by_call):
    """first_starts_by_call: per call, each rank's first start (ns). -> the medians over the calls of the
    earliest, second, ... latest rank's start after the call's earliest, us (calls with fewer ranks left out)."""
    calls = [sorted(starts) for starts in first_starts_by_call if starts]
    if not calls:
        return []
    ranks = max(len(starts) for starts in calls)
    full = [starts for starts in calls if len(starts) == ranks]
    return [statistics.median((starts[k] - starts[0]) / 1e3 for starts in full) for k in range(ranks)]


def print_start_order(first_starts_by_call, what):
    order = start_order(first_starts_by_call)
    if order:
        print(f"{what}, earliest to last rank (us after the earliest, medians): " +
              " ".join(f"{value:.1f}" for value in order))
