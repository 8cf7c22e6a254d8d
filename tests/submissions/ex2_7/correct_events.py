# DDP's rule for closing a bucket, and the schedule written as a loop over events in time.
import heapq


def exposed_communication(numels, bucket_numel, compute_s, alpha_s, beta_s):
    order = list(range(len(numels)))[::-1]
    groups, current, held = [], [], 0
    for i in order:
        current.append(i)
        held += numels[i]
        if held >= bucket_numel:
            groups.append(current)
            current, held = [], 0
    if current:
        groups.append(current)
    clock, done_at = 0.0, {}
    for i in order:
        clock += compute_s[i]
        done_at[i] = clock
    queue = [(max(done_at[i] for i in g), k) for k, g in enumerate(groups)]
    heapq.heapify(queue)
    busy_until = 0.0
    while queue:
        ready, k = heapq.heappop(queue)
        busy_until = max(ready, busy_until) + alpha_s + beta_s * sum(numels[i] for i in groups[k])
    return max(busy_until - clock, 0.0)
