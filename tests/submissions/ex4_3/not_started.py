raise NotImplementedError()
