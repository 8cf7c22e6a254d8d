def exposed_communication(numels, bucket_numel, compute_s, alpha_s, beta_s):
    n = len(numels)
    ready, t = [0.0] * n, 0.0
    for i in reversed(range(n)):  # backward: the last parameter's gradient first
        t += compute_s[i]
        ready[i] = t
    end_of_backward = t
    buckets, bucket, size = [], [], 0
    for i in reversed(range(n)):
        if bucket and size + numels[i] > bucket_numel:
            buckets.append(bucket)
            bucket, size = [], 0
        bucket.append(i)
        size += numels[i]
    buckets.append(bucket)
    network_free = 0.0
    for bucket in buckets:
        start = max(max(ready[i] for i in bucket), network_free)
        network_free = start + alpha_s + beta_s * sum(numels[i] for i in bucket)
    return network_free - end_of_backward
