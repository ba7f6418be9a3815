"""contrasuite.pipelines: the engine, configs, CLI and reports that run any domain Task."""
