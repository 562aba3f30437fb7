# One image for the API and the workers. GPU hosts base it on a CUDA-enabled torch image by
# overriding BASE and KT_TORCH_SPEC (e.g. BASE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime).
ARG BASE=python:3.12-slim
FROM ${BASE}
ARG KT_TORCH_SPEC=torch==2.13.0
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service service
COPY workers workers
COPY kernels kernels
COPY search search
COPY db db
COPY export export
RUN pip install --no-cache-dir "${KT_TORCH_SPEC}" && pip install --no-cache-dir -e '.[gpu,agents,ops]'
ENV KT_DATA_DIR=/data
VOLUME /data
EXPOSE 8765
CMD ["kerneltune", "serve", "--host", "0.0.0.0", "--port", "8765"]
