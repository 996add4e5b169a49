class Tekkenizer: pass
