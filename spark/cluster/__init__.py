"""Where a Spark job runs: in this process (`local`, the default) or submitted to a cluster
(`emr-serverless`, `spark.cluster.emr_serverless`). The platform side of a submission: boto3 only,
no pyspark, no Django."""
