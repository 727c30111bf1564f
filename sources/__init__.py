"""dlt sources of the signing service (one folder per source)."""
