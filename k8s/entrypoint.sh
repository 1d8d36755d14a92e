#!/usr/bin/env bash
# Container entrypoint of the pulsar-balancer image.
#   entrypoint.sh executor   -> a Spark executor: Spark on Kubernetes starts its executor pods
#                               with the argument "executor" and describes the executor in
#                               SPARK_* environment variables (spark-on-k8s overlay).
#   entrypoint.sh ARGS...    -> the pulsar-balancer command line with ARGS.
set -euo pipefail

if [[ "${1:-}" != "executor" ]]; then
  exec pulsar-balancer "$@"
fi

# The Spark jars ship inside the pyspark wheel.
jars="$(python3 -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"

# Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
java_opts=()
i=0
while true; do
  name="SPARK_JAVA_OPT_${i}"
  [[ -n "${!name+x}" ]] || break
  java_opts+=("${!name}")
  i=$((i + 1))
done

exec java "${java_opts[@]}" \
  -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
  -cp "${SPARK_CONF_DIR:-/opt/spark/conf}:${jars}/*" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "${SPARK_DRIVER_URL}" \
  --executor-id "${SPARK_EXECUTOR_ID}" \
  --cores "${SPARK_EXECUTOR_CORES}" \
  --app-id "${SPARK_APPLICATION_ID}" \
  --hostname "${SPARK_EXECUTOR_POD_IP}" \
  --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
  --podName "${SPARK_EXECUTOR_POD_NAME}"
