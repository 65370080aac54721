"""The config code, in one package: the field types and the registries that parts declare their fields with
(fields.py, registry.py: the lowest layer, imported by every part), the fields of the sections no part owns
(sections.py), the whole spec composed from both (schema.py), the command line checked before it is parsed
(command_line.py) and its overrides (overrides.py), the checks that run before anything compiles (validate.py) and
the parser of a config file's argument (variants.py). The config files themselves are in configs/."""
