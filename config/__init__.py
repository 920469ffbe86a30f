"""Settings: the config model, loading, editing and watching config.json."""
