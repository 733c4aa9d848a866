"""dms-gateway: speak NuNet DMS behaviors under a DID/capability-signed identity."""

__version__ = "0.1.0"
