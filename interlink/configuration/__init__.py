"""``dmsgw serve``'s configuration: every setting, the YAML file, and the checked result."""
