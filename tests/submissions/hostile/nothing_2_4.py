def train_accumulate(model, optimizer, micro_batches, accum_steps):
    pass
