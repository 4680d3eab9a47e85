# Every date and time the portal shows carries its time zone (TIME_ZONE, UTC by default), and
# sorts and reads the same everywhere: 2026-11-23 22:15:04 UTC.
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
